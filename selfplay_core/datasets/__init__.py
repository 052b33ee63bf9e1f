"""Benchmark and task loaders that return the project's `Problem` records."""
