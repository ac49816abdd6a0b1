"""Synthetic datasets for testing and benchmarking nerfstudio_accel."""
