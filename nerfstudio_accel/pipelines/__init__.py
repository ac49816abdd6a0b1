"""Training pipelines: batch sizing and config resolution for accel models, and hard sample mining."""
