"""What the web viewer shows of a training run: the Accel panel, its statistics and 3D overlays, and their wiring."""
