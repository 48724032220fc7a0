"""Benchmarks: each prints ratios measured side by side in one run, never asserts a time (scripts/bench_*.py)."""
