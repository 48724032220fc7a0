"""This machine's fp32 matmul speed at a model's own shapes: the roofline of a CPU training step.

A CPU step is almost all matmuls of the model's linear layers (lm_head included), so the best a
step can do is their speed at the step's shapes with the threads the trainer uses. It drifts with
the day and with whoever else uses the cores, so every wall time this project prints or documents
comes with the roofline measured beside it (scripts/bench_step.py, scripts/quickstart_run.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path


def linear_shapes(model_dir: str | Path) -> list[tuple[int, int, int]]:
    """(in, out, count) of every matmul one token goes through in a forward (lm_head included).

    Read from the HF ``config.json`` of a Llama/Qwen2-style decoder.
    """
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    hidden = int(cfg["hidden_size"])
    inter = int(cfg["intermediate_size"])
    layers = int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab = int(cfg["vocab_size"])
    return [
        (hidden, heads * head_dim, 2 * layers),  # q, o
        (hidden, kv_heads * head_dim, 2 * layers),  # k, v
        (hidden, inter, 2 * layers),  # gate, up
        (inter, hidden, layers),  # down
        (hidden, vocab, 1),  # lm_head
    ]


def matmul_params(model_dir: str | Path) -> int:
    """Weights one token multiplies in a forward: FLOPs per token are ~2x this (embedding lookup excluded)."""
    return sum(i * o * c for i, o, c in linear_shapes(model_dir))


def lm_head_params(model_dir: str | Path) -> int:
    """The LM head's share of :func:`matmul_params` (the last of :func:`linear_shapes`)."""
    i, o, c = linear_shapes(model_dir)[-1]
    return i * o * c


def roofline_gflops(model_dir: str | Path, tokens: int = 1024, repeats: int = 3) -> float:
    """fp32 GFLOP/s of one pass over the model's linear layers at ``tokens`` rows (best of ``repeats``).

    Uses this process's torch threads: set them as the trainer does first
    (``recipe.cpu_backend.settings.worker_threads``).
    """
    import torch

    shapes = linear_shapes(model_dir)
    gen = torch.Generator().manual_seed(0)
    x = {i: torch.randn(tokens, i, generator=gen) for i, _, _ in shapes}
    w = {(i, o): torch.randn(i, o, generator=gen) * 0.02 for i, o, _ in shapes}
    flops = sum(2.0 * tokens * i * o * c for i, o, c in shapes)
    for i, o, _ in shapes:  # warm-up: first calls pick kernels and allocate
        torch.mm(x[i], w[(i, o)])
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i, o, c in shapes:
            for _ in range(c):
                torch.mm(x[i], w[(i, o)])
        best = min(best, time.perf_counter() - start)
    return flops / best / 1e9
