"""nerfstudio-accel: fast NeRF training methods for nerfstudio (occupancy-grid sampling, pure-PyTorch fallbacks)."""

__version__ = "0.1.0"
