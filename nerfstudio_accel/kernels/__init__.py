"""Fused kernels that need no C++ compiler (numba on CPU, Triton on CUDA), the hash-grid layout they implement
and the marching lattice they share: the lowest layer, which imports nothing else of the package."""

from nerfstudio_accel.kernels.stale_cache import drop_stale_compiled_kernels

drop_stale_compiled_kernels()  # before any kernel module loads a cached kernel
