"""Procedural scenes for tests and benchmarks: a ray-traced object in Blender format, an unbounded capture in nerfstudio-data format, and ``ns-accel-scene``."""
