"""The runtime data path: the prefetching datamanager, the seeded pixel sampler and the scene checks."""
