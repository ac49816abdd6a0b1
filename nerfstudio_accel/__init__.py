"""nerfstudio-accel: fast NeRF training methods for nerfstudio on CPU and GPU (occupancy-grid and proposal sampling, hard sample mining, fused kernels)."""

from nerfstudio_accel.denormals import flush_denormals

__version__ = "0.2.0"

flush_denormals()  # before torch's and numba's CPU thread pools start: their threads copy the setting
