"""Evaluation of COPO/verl checkpoints: sampling, scoring, mean@k / maj@k / pass@k, resumable store.

Modules (one responsibility each):
    metrics      pure per-problem and per-dataset metrics (no torch, no I/O)
    datasets     eval parquet loading (data_prep schema) and k per data_source
    checkpoints  model discovery (HF folder, verl run / global_step_N) and lazy FSDP merge
    backends     generation: transformers on CPU/GPU, vLLM data-parallel (import-guarded)
    scoring      the project's reward function, batched
    store        per (checkpoint, dataset) files, written atomically; summaries
    runner       the loop over checkpoints x datasets with progress output
    children     the process groups it starts, stopped on SIGTERM/SIGINT by scripts/evaluate.py

Command line: ``scripts/evaluate.py``. Training metrics and plots live in ``recipe.tracking``.
"""
