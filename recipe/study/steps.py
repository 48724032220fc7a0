"""Per-step rows of a study run (from its ``metrics.jsonl``) and the CSV writer both CPU studies use."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe.files import atomic_file
from recipe.tracking import names
from recipe.tracking.jsonl import read_metrics_jsonl, val_accuracy

# metrics.jsonl keys (verl's and recipe/copo/trainer.py's) copied into steps.csv
STEP_COLUMNS = {
    "train_acc": names.SCORE_MEAN,
    "response_length": names.RESPONSE_LENGTH_MEAN,
    "frac_nonzero_adv": names.SIGNAL_FRAC_NONZERO_ADV,
    "frac_groups_all_correct": names.SIGNAL_FRAC_ALL_CORRECT,
    "frac_groups_all_wrong": names.SIGNAL_FRAC_ALL_WRONG,
    "frac_groups_zero_variance": names.SIGNAL_FRAC_ZERO_VARIANCE,
    "num_responses": names.SIGNAL_NUM_RESPONSES,
    "step_time_s": names.STEP_TIME,
}


def step_rows(
    run_dir: Path, method: str, seed: int, extra_columns: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """One dict per logged step of a run (step 0 = validation before training).

    Columns: ``run, method, seed, step``, ``val_acc`` where validated, :data:`STEP_COLUMNS` (and
    ``extra_columns``, name -> metric key) where logged, ``generated_samples`` / ``useful_samples``
    on training steps, and ``train_wall_s``, the cumulative training time (validation excluded).
    """
    columns = {**STEP_COLUMNS, **(extra_columns or {})}
    rows: dict[int, dict[str, Any]] = {}
    for metrics in read_metrics_jsonl(run_dir / "metrics.jsonl"):
        step = int(metrics["step"])
        row = rows.setdefault(step, {"run": run_dir.name, "method": method, "seed": seed, "step": step})
        acc = val_accuracy(metrics)
        if acc is not None:
            row["val_acc"] = acc
        for column, key in columns.items():
            if metrics.get(key) is not None:
                row[column] = float(metrics[key])
        if "num_responses" in row:
            n = row["num_responses"]
            # DAPO: every evicted (or surplus) group was generated too, then thrown away.
            groups = float(metrics.get(names.SIGNAL_NUM_GROUPS, 0.0))
            per_group = n / groups if groups else 0.0
            extra_groups = sum(float(metrics.get(k, 0.0) or 0.0) for k in names.FILTER_GROUPS_DISCARDED)
            row["generated_samples"] = n + extra_groups * per_group
            row["useful_samples"] = row["frac_nonzero_adv"] * n
    out = [rows[s] for s in sorted(rows)]
    wall = 0.0
    for row in out:
        wall += row.get("step_time_s", 0.0)
        row["train_wall_s"] = wall
    return out


def write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """``rows`` as CSV with ``columns`` (others ignored), floats to 6 significant digits; atomic."""
    with atomic_file(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
