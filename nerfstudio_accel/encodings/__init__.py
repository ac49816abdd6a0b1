"""Position encodings: the multiresolution hash encoding as a torch module, and its pure-PyTorch reference."""
