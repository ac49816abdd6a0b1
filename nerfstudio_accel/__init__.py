"""nerfstudio-accel: fast NeRF training methods for nerfstudio (occupancy-grid sampling, pure-PyTorch fallbacks)."""

from nerfstudio_accel.denormals import flush_denormals

__version__ = "0.1.0"

flush_denormals()  # before torch's and numba's CPU thread pools start: their threads copy the setting
