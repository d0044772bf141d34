"""Ready-made models and datasets for demos, tests and benchmarks."""
