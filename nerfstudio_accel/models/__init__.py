"""The accel model contract (a config resolved once, the sample / field_raw / render seams) and the two methods built on it."""
