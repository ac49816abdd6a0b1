"""Samplers that place points along rays: occupancy grid (nerfacc or pure PyTorch)."""
