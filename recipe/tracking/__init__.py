"""Metric names, the metrics.jsonl writer and reader, training-metric readers and plots, wandb checks."""
