"""Runs per CPU-hour: today's single-seed fast trainer against S seeds batched in one process, side by side.

    .venv/bin/python scripts/bench_seeds.py                     # S = 8, 3 timed steps, GRPO
    .venv/bin/python scripts/bench_seeds.py --seeds 16 --steps 2 --method copo_soft_with_zero

On a testbed-shaped policy (:mod:`recipe.bench.seeds_fixture`: ``ModelShape()``, the testbed's tokenizer and
tasks, random weights, so every response runs to the 16-token cap), in one process and one thread:

1. single: ``recipe.study.fast.run.FastRun`` (seed 0), one warm-up step, then ``--steps`` timed steps and one
   timed validation; CPU seconds per phase of the timed steps (generation, reward, the update's forward,
   backward; the rest is the optimizer, advantages, loss and bookkeeping);
2. batched: ``recipe.study.fast.seeds.ManySeeds`` (seeds 0..S-1), the same;
3. single again (the machine is shared: its load drifts; the single side is the mean of 1 and 3).

Both CPU seconds (``time.process_time``, the figure that counts) and wall seconds are printed, with the load
average and the machine's fp32 matmul rate at the model's shapes (``recipe.cpu_backend.roofline``) before and
after. A run's CPU cost is composed for testbed v3's schedule (150 steps, validation of 1,024 problems x 4 at 6
points) from the per-step and per-validation-problem figures; runs per CPU-hour = 3600 / that. Not counted on
either side: the reward's sandbox worker (``recipe.reward.pool``, a separate process) and start-up.
Target (issue 37): batched >= 8x the single side's runs per CPU-hour. Printed as ok/MISS, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from recipe.bench.seeds_fixture import build_testbed_like, fast_overrides

TARGET = 8.0
RUN_STEPS, RUN_VALIDATIONS, RUN_VAL_PROBLEMS = (
    150,
    6,
    1024,
)  # testbed v3 (recipe/copo/config/testbed3_cpu.yaml)


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.monotonic(), time.process_time()
    fn()
    return time.monotonic() - wall, time.process_time() - cpu


# Where a step's CPU time goes: the functions each trainer calls for a phase, by module (patched while timed).
PHASES: dict[str, dict[str, str]] = {
    "single": {
        "recipe.study.fast.rollout:sample_forked": "generate",
        "recipe.study.fast.rollout:score": "reward",
        "recipe.study.fast.update:response_log_probs": "forward",
    },
    "batched": {
        "recipe.study.fast.seeds:sample_seeds": "generate",
        "recipe.study.fast.seeds:score_groups": "reward",
        "recipe.study.fast.grouped_step:seed_log_probs": "forward",
    },
}


@contextlib.contextmanager
def phase_timers(side: str) -> Iterator[dict[str, float]]:
    """CPU seconds per phase (generate, reward, forward, backward) while the block runs."""
    import importlib

    import torch

    totals: dict[str, float] = defaultdict(float)
    saved: list[tuple[Any, str, Any]] = []

    def wrap(fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[phase] += time.process_time() - start

        return timed

    targets = [(*k.split(":"), v) for k, v in PHASES[side].items()]
    try:
        for module_name, attr, phase in targets:
            module = importlib.import_module(module_name)
            saved.append((module, attr, getattr(module, attr)))
            setattr(module, attr, wrap(getattr(module, attr), phase))
        saved.append((torch.Tensor, "backward", torch.Tensor.backward))
        torch.Tensor.backward = wrap(torch.Tensor.backward, "backward")  # type: ignore[method-assign]
        yield totals
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(trainer: Any, steps: int, seeds: int) -> dict[str, float]:
    """Per run: CPU and wall seconds of one step and of one validation problem (``seeds`` runs share them)."""
    trainer.step(1)  # warm-up: allocator, kernels, the reward's worker
    with phase_timers("single" if seeds == 1 else "batched") as phases:
        step_wall, step_cpu = _timed(lambda: [trainer.step(k) for k in range(2, 2 + steps)])
    split = {f"phase_{k}": v / steps / seeds for k, v in phases.items()}
    val_wall, val_cpu = _timed(lambda: trainer.validate(1))
    problems = len(trainer.val)
    return {
        "step_cpu": step_cpu / steps / seeds,
        "step_wall": step_wall / steps / seeds,
        "val_cpu": val_cpu / problems / seeds,
        "val_wall": val_wall / problems / seeds,
        "val_problems": float(problems),
        **split,
    }


def run_cost(m: dict[str, float], kind: str) -> float:
    """Seconds (``kind`` cpu or wall) of one testbed-v3-scheduled run from per-step and per-problem figures."""
    return RUN_STEPS * m[f"step_{kind}"] + RUN_VALIDATIONS * RUN_VAL_PROBLEMS * m[f"val_{kind}"]


def main(argv: list[str] | None = None) -> int:
    import torch

    from recipe.copo.config_check import compose_and_validate
    from recipe.cpu_backend.roofline import roofline_gflops
    from recipe.study.fast.run import FastRun
    from recipe.study.fast.seeds import ManySeeds, with_seed
    from recipe.study.methods import METHODS

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=8, help="S, seeds batched (default: %(default)s)")
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="timed steps per side, after one warm-up step (default: %(default)s)",
    )
    parser.add_argument(
        "--val-per-task",
        type=int,
        default=32,
        help="validation problems per task, 2 tasks (default: %(default)s)",
    )
    parser.add_argument("--method", default="grpo", choices=sorted(METHODS), help="(default: %(default)s)")
    parser.add_argument("--root", type=Path, default=None, help="fixture folder (default: a temporary one)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or Path(tmp)
        model_dir, data_dir = build_testbed_like(root, val_per_task=args.val_per_task)
        base = compose_and_validate(
            fast_overrides(model_dir, data_dir, 0, RUN_STEPS, *METHODS[args.method]),
            config_name="testbed2_cpu",
        )
        print(
            f"[bench_seeds] {_load()}; fp32 matmul at the model's shapes {roofline_gflops(model_dir):.1f} GFLOP/s"
        )
        single = [measure(FastRun(base), args.steps, 1)]
        print(f"[bench_seeds] single done; {_load()}", flush=True)
        batched = measure(ManySeeds([with_seed(base, k) for k in range(args.seeds)]), args.steps, args.seeds)
        print(f"[bench_seeds] batched done; {_load()}", flush=True)
        single.append(measure(FastRun(base), args.steps, 1))
        print(
            f"[bench_seeds] {_load()}; fp32 matmul at the model's shapes {roofline_gflops(model_dir):.1f} GFLOP/s"
        )
    one = {k: sum(m[k] for m in single) / len(single) for k in single[0]}
    problems = int(batched["val_problems"])
    print(f"\nper run ({args.method}, {args.steps} timed steps, {problems} validation problems x 4)")
    print(f"{'':28s}{'single':>12s}{f'batched S={args.seeds}':>16s}{'ratio':>8s}")
    for key, label in (("step_cpu", "CPU-s per step"), ("val_cpu", "CPU-ms per val problem"),
                       ("step_wall", "wall-s per step"), ("val_wall", "wall-ms per val problem")):  # fmt: skip
        scale = 1000.0 if key.startswith("val") else 1.0
        print(
            f"{label:28s}{one[key] * scale:12.4f}{batched[key] * scale:16.4f}{one[key] / batched[key]:8.2f}"
        )
    for phase in ("generate", "reward", "forward", "backward"):
        key = f"phase_{phase}"
        label = f"  of which {phase}"
        print(f"{label:28s}{one[key]:12.4f}{batched[key]:16.4f}{one[key] / batched[key]:8.2f}")
    cpu_single, cpu_batched = run_cost(one, "cpu"), run_cost(batched, "cpu")
    ratio = cpu_single / cpu_batched
    print(
        f"testbed-v3 run ({RUN_STEPS} steps, {RUN_VALIDATIONS} x {RUN_VAL_PROBLEMS} val problems): "
        f"{cpu_single:.1f} vs {cpu_batched:.1f} CPU-s per run"
    )
    print(
        f"runs per CPU-hour: single {3600 / cpu_single:.1f}, batched {3600 / cpu_batched:.1f}, "
        f"ratio {ratio:.2f}x (target >= {TARGET:.0f}x: {'ok' if ratio >= TARGET else 'MISS'})"
    )
    print(f"single side's two measurements (CPU-s per step): {[round(m['step_cpu'], 4) for m in single]}")
    return 0
