"""nerfstudio pipelines of this package."""
