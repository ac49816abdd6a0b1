"""Fused kernels that need no C++ compiler (numba on CPU, Triton on CUDA), the hash-grid layout they implement, and the choice of backend."""
