"""Benchmarks (not shipped in the wheel): `python bench/run.py` runs them side by side."""
