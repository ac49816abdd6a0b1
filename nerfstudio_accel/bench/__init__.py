"""Equal-budget training and evaluation helpers (the core of benchmarks and learning tests)."""
