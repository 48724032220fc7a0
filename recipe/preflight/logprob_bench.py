"""Before/after of the log-prob path, side by side in one run: verl's plain path (what the paper
configs ran before: ``use_fused_kernels=false``, so ``logprobs_from_logits`` and, without flash-attn,
its per-token loop) against the shipped fused torch path.

Each variant is the preflight's actor stage (``actor_stage``, a fresh process: verl's fused kernels
patch the model class) on the same model, batch and settings otherwise; variants alternate
(A B A B ...) so that drift in the machine's speed hits both. Every row carries the load average
and the measured matmul speed of its own run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from recipe.files import REPO_ROOT

VARIANTS = {
    "before (verl plain log-probs)": ["actor_rollout_ref.model.use_fused_kernels=false"],
    "after (fused, torch backend)": [],
}


def run_variant(spec: dict[str, Any], overrides: list[str], work: Path) -> dict[str, Any]:
    out = work / "result.json"
    spec = {**spec, "overrides": [*spec["overrides"], *overrides], "parity": False}
    root = str(REPO_ROOT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(
        [sys.executable, "-m", "recipe.preflight.actor_stage", json.dumps(spec), str(out)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"actor stage failed ({overrides}):\n{proc.stderr[-3000:]}")
    result = json.loads(out.read_text())
    result["load"] = os.getloadavg()[0]
    return result


def bench(spec: dict[str, Any], rounds: int) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` runs of each variant, alternating."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name, overrides in VARIANTS.items():
                runs[name].append(run_variant(spec, overrides, Path(tmp)))
                print(f"[bench_logprob] round {r + 1}/{rounds}: {name} done", file=sys.stderr, flush=True)
    return runs


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Medians per variant, and the after/before ratios."""
    lines = [
        f"{'variant':<31} {'ops/token':>9} {'ops/micro-batch':>15} {'log-prob pass s':>15} {'update s':>9} "
        f"{'TFLOP/s peak':>12} {'load (1 min)':>12}"
    ]
    med: dict[str, dict[str, float]] = {}
    for name, results in runs.items():
        m = {
            "per_token": statistics.median(r["ops"]["per_token"] for r in results),
            "per_micro": statistics.median(r["ops"]["calls"] / r["ops"]["micro_batches"] for r in results),
            "log_prob_s": statistics.median(r["speed"]["log_prob_s"] for r in results),
            "update_s": statistics.median(r["speed"]["update_s"]["copo"] for r in results),
            "peak": statistics.median(r["speed"]["peak_tflops"] for r in results),
            "load": statistics.median(r["load"] for r in results),
        }
        med[name] = m
        lines.append(
            f"{name:<31} {m['per_token']:>9.3f} {m['per_micro']:>15.1f} {m['log_prob_s']:>15.3f} "
            f"{m['update_s']:>9.3f} {m['peak']:>12.3f} {m['load']:>12.1f}"
        )
    before, after = (med[name] for name in VARIANTS)
    first_runs = next(iter(runs.values()))
    first = first_runs[0]
    lines.append(
        f"after/before: log-prob pass {after['log_prob_s'] / before['log_prob_s']:.2f}x, update "
        f"{after['update_s'] / before['update_s']:.2f}x; {first['tokens']} tokens in {first['sequences']} "
        f"sequences, {first['settings']['compute_dtype']}, vocabulary from {first['model_dir']}; "
        f"{os.cpu_count()} cores, medians of {len(first_runs)} run(s) each"
    )
    return "\n".join(lines)
