"""Fused kernels that need no C++ compiler (numba on CPU, Triton on CUDA), the hash-grid layout they implement
and the marching lattice they share: the lowest layer, which imports nothing else of the package."""
