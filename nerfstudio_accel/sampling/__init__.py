"""Ray samplers behind one interface (occupancy grid, proposal fields), packed samples, and the proposal ops."""
