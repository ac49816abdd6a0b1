"""nerfstudio models of this package."""
