"""Spatial segmentation: a scene cut into disjoint convex cells, one field and one sampler per cell, every ray
composited front to back over the cells it crosses (docs/spatial_blocks.md)."""
