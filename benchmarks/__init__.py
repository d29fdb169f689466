"""Benchmarks and one-off checks, grouped by subject; run each file as a script (its docstring says how)."""
