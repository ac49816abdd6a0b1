"""Training machinery shared by accel methods."""
