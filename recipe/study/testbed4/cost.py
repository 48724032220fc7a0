"""Measure the regimes' workload on this machine: a few GRPO steps, single-seed and batched -> ``cost.csv``.

Both trainers run the composed ``regimes_cpu`` config on one regime's data with ``steps`` steps
(validation at step 0 and after the last step, as a run does): the single-seed fast trainer
(``recipe.study.fast.run``) for one seed, then the batched one (``recipe.study.fast.seeds``) for S
seeds in one process. Per run: the mean CPU seconds of a training step and of a validation (the
batched trainer's divided by S). One thread, in this process; the load and the one-thread matmul
speed are recorded before and after, since the machine is shared.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe.study.testbed.build import Testbed
from recipe.study.testbed4.budget import COST_COLUMNS


def _config(regime_tb: Testbed, seed: int, steps: int, config_name: str) -> Any:
    from recipe.copo.config_check import compose_and_validate
    from recipe.study.common.jobs import run_spec

    spec = run_spec(regime_tb, "grpo", seed, 1e-4, steps=steps, config_name=config_name)
    return compose_and_validate(spec.overrides(), config_name=config_name)


def _per_run(run_dir: Path, seeds: int) -> tuple[float, float]:
    """Mean CPU seconds per step and per validation of one run folder (divided by ``seeds``)."""
    from recipe.tracking import names
    from recipe.tracking.jsonl import read_metrics_jsonl

    rows = read_metrics_jsonl(run_dir / "metrics.jsonl")
    steps = [r[names.PERF_STEP_CPU_S] for r in rows if names.PERF_STEP_CPU_S in r]
    vals = [r[names.PERF_VAL_CPU_S] for r in rows if names.PERF_VAL_CPU_S in r]
    return sum(steps) / len(steps) / seeds, sum(vals) / len(vals) / seeds


def measure(
    regime_tb: Testbed,
    out: Path,
    steps: int,
    seeds: Sequence[int],
    config_name: str,
    planned: tuple[int, int],
) -> list[dict[str, Any]]:
    """One ``cost.csv`` row per trainer (``planned``: the workload's steps and validation period)."""
    import pandas as pd

    from recipe.cpu_backend.roofline import roofline_gflops
    from recipe.study.fast.run import run
    from recipe.study.fast.seeds import run_seeds, with_seed

    val_problems = len(pd.read_parquet(regime_tb.data / "val.parquet"))
    rows = []
    for trainer, batch in (("single", seeds[:1]), ("batched", seeds)):
        load_start = os.getloadavg()[0]
        gflops = roofline_gflops(regime_tb.model)
        config = _config(regime_tb, batch[0], steps, config_name)
        if trainer == "single":
            run(config, out / trainer)
            step_cpu, val_cpu = _per_run(out / trainer, 1)
        else:
            dirs = [out / trainer / f"seed{s}" for s in batch]
            run_seeds([with_seed(config, s) for s in batch], dirs)
            step_cpu, val_cpu = _per_run(dirs[0], len(batch))
        rows.append(
            {
                "trainer": trainer,
                "seeds_in_batch": len(batch),
                "steps_measured": steps,
                "step_cpu_s": step_cpu,
                "val_cpu_s": val_cpu,
                "val_problems": val_problems,
                "planned_steps": planned[0],
                "test_freq": planned[1],
                "load1_start": load_start,
                "load1_end": os.getloadavg()[0],
                "gflops": gflops,
            }
        )
        print(f"[testbed4] cost {trainer}: {rows[-1]}", flush=True)
    return rows


__all__ = ["COST_COLUMNS", "measure"]
