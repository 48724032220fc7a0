"""Does GRPO learn in every regime within the budget? One tuning run per regime (tuning data, not a result).

For each regime: GRPO on the plan's tuning seed at the middle rate of its grid, the full budget, run as
the ``tune`` phase's job of that (method, seed, rate) would run (same folder, same fingerprint, so the
later tuning phase reuses it). ``probe.csv``: per regime and validation step, the validation mean@k
(from the run's ``validation.npz``). The issue's criterion: >= 5 points of gain in every regime.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

PROBE_COLUMNS = ["regime", "method", "seed", "lr", "step", "accuracy", "problems", "cpu_s"]
PROBE_METHOD = "grpo"


def probe_job(plan: Any, testbed: Any) -> tuple[Any, Path]:
    """The regime's probe job (the tuning phase's GRPO job at the grid's middle rate) and its folder."""
    from recipe.study.common import cli

    lr = plan.lr_grid[len(plan.lr_grid) // 2]
    (job,) = cli.fast_jobs(
        plan, testbed, [(PROBE_METHOD, plan.tuning_seeds[0], lr)], plan.runs_dir / "tuning", True
    )
    # the driver names jobs uniquely; the folder (and the fingerprint) stay the tuning phase's
    return replace(job, name=f"{plan.name}/{job.name}"), job.out


def curve_rows(regime: str, plan: Any, run_dir: Path) -> list[dict[str, Any]]:
    """``probe.csv`` rows of one finished run: validation mean@k per validation step."""
    import json

    import numpy as np

    val = np.load(run_dir / "validation.npz")
    result = json.loads((run_dir / "result.json").read_text())
    lr = plan.lr_grid[len(plan.lr_grid) // 2]
    return [
        {
            "regime": regime,
            "method": PROBE_METHOD,
            "seed": plan.tuning_seeds[0],
            "lr": lr,
            "step": int(step),
            "accuracy": float(correct.mean() / int(val["n"])),
            "problems": int(correct.shape[0]),
            "cpu_s": float(result["cpu_s"]),
        }
        for step, correct in zip(val["steps"], val["correct"], strict=True)
    ]


def probe_markdown(probe: Any, short_budget: int = 100) -> str:
    """Per regime: step-0 and final mean@k, the gain, whether it reaches 5 points, and the gain at the
    last validation within ``short_budget`` steps (what the plan's reduced budget would have seen)."""
    cut = int(probe[probe.step <= short_budget].step.max())
    lines = [
        f"| regime | step 0 (%) | final (%) | gain (points) | >= 5 points | gain by step {cut} (points) | run CPU-s |",
        "|---|---|---|---|---|---|---|",
    ]
    for regime, mine in probe.groupby("regime", sort=False):
        mine = mine.sort_values("step")
        start, final = float(mine.accuracy.iloc[0]), float(mine.accuracy.iloc[-1])
        gain = 100 * (final - start)
        early = 100 * (float(mine[mine.step == cut].accuracy.iloc[0]) - start)
        lines.append(
            f"| {regime} | {100 * start:.1f} | {100 * final:.1f} | {gain:+.1f} | {'yes' if gain >= 5 else 'no'} | "
            f"{early:+.1f} | {mine.cpu_s.iloc[0]:.0f} |"
        )
    r = probe.iloc[0]
    lines += [
        "",
        f"GRPO, tuning seed {r.seed}, lr {r.lr:g}, validation mean@4 over each regime's {r.problems} validation "
        f"problems at steps {', '.join(str(s) for s in sorted(set(probe.step)))}. Tuning data: one seed, one rate, "
        "not a result.",
    ]
    return "\n".join(lines) + "\n"
