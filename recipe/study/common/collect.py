"""Run folders -> the study's committed CSVs (``docs/study_cpu/testbed2/``); the report reads only these.

Per run (fast trainer: ``metrics.jsonl``, ``validation.npz``, ``result.json``; real trainer:
``metrics.jsonl``, ``usage.json``; both: the driver's ``summary.json``):

* ``runs.csv``: one row per run: phase, trainer, method, seed, lr; the validation curve's start, final
  and area under the curve (mean accuracy over training, trapezoid) overall and per task; wall and
  CPU seconds; responses generated and responses with a non-zero advantage;
* ``validation.csv``: validation accuracy per run, step and task;
* ``blocks.csv``: per fast run, block of the plan's ``block_steps`` steps and task: the shares of all-correct,
  all-wrong and zero-variance groups among the groups generated, and the training accuracy;
* ``curves.csv``: the same per step and task, averaged over the seeds of each (phase, method);
* ``mechanism.csv`` (runs that log ``mechanism/`` metrics): per (phase, method, step), the advantage of
  wrong answers by group kind and success bin, pooled over seeds (``recipe.study.common.mechanism``);
* ``problems.csv`` (confirmatory runs): per validation problem, its task and level, and per run the
  problem's area under its mean@k curve in integer units: ``units = c_0 + 2 c_1 + ... + 2 c_{V-2} +
  c_{V-1}`` over the V equally spaced validations (c: correct samples of k), so the problem's AUC is
  ``units / (2 k (V - 1))``.

A run budgeted in generated samples (compute-matched DAPO) is read on the other runs' axis: its
validations stand at the steps whose generated samples they were the first to reach
(``recipe.study.common.sample_axis``), in ``runs.csv``'s curve columns, ``validation.csv`` and
``problems.csv``; ``runs.csv``'s ``steps`` stays the steps it trained.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recipe import stats
from recipe.study.common.jobs import USAGE
from recipe.study.common.mechanism import COLUMNS as MECHANISM_COLUMNS
from recipe.study.common.mechanism import mechanism_rows
from recipe.study.common.plan import StudyPlan
from recipe.study.common.sample_axis import on_step_axis, step_equivalents, units_on_step_axis
from recipe.study.driver import SUMMARY
from recipe.study.steps import write_csv
from recipe.study.testbed.mixed import level_of
from recipe.tracking import names
from recipe.tracking.jsonl import read_metrics_jsonl
from recipe.tracking.names import SIGNAL_FRAC_NONZERO_ADV, SIGNAL_NUM_RESPONSES, VAL_PREFIX

ALL = names.GROUPS_ALL


@dataclass(frozen=True)
class PlannedRun:
    """A run of the study plan: its phase, trainer and settings, and its folder."""

    phase: str  # tuning, pilot, confirmatory, real
    trainer: str  # fast or main_copo
    method: str
    seed: int
    lr: float
    path: Path

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class ValProblem:
    row: int
    task: str
    level: str


def validation_problems(val_parquet: Path) -> list[ValProblem]:
    """The validation set's problems in file order (the order of ``validation.npz``'s columns)."""
    import pandas as pd

    frame = pd.read_parquet(val_parquet)
    return [
        ValProblem(i, str(r["data_source"]).rsplit("/", 1)[-1], level_of(str(r["extra_info"]["original_id"])))
        for i, r in enumerate(frame.to_dict("records"))
    ]


def _task_of(key: str) -> str | None:
    """``val-core/testbed2/add/acc/mean@4`` -> ``add``."""
    if not key.startswith(VAL_PREFIX) or "/acc/mean@" not in key:
        return None
    return key[len(VAL_PREFIX) :].split("/acc/mean@")[0].rsplit("/", 1)[-1]


def validation_curve(rows: Sequence[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """step -> {task: mean@k, "all": mean over tasks} from a metrics.jsonl's val-core keys."""
    out: dict[int, dict[str, float]] = {}
    for row in rows:
        per_task = {t: float(v) for k, v in row.items() if (t := _task_of(k)) is not None}
        if per_task:
            per_task[ALL] = float(np.mean(list(per_task.values())))
            out[int(row["step"])] = per_task
    return out


def _curve_stats(curve: dict[int, dict[str, float]], tasks: Sequence[str]) -> dict[str, float]:
    steps = sorted(curve)
    out: dict[str, float] = {}
    for task in (ALL, *tasks):
        suffix = "" if task == ALL else f"_{task}"
        if any(task not in curve[s] for s in steps):  # a run validated on other tasks only
            out.update({f"start{suffix}": math.nan, f"final{suffix}": math.nan, f"auc{suffix}": math.nan})
            continue
        acc = [curve[s][task] for s in steps]
        out[f"start{suffix}"] = acc[0]
        out[f"final{suffix}"] = acc[-1]
        out[f"auc{suffix}"] = stats.auc(steps, acc)
    return out


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def run_row(run: PlannedRun, tasks: Sequence[str]) -> tuple[dict[str, Any], dict[int, dict[str, float]]]:
    """The run's ``runs.csv`` row and its validation curve."""
    rows = read_metrics_jsonl(run.path / "metrics.jsonl")
    # a run budgeted in generated samples (compute-matched DAPO) is read at the other runs' steps
    curve = on_step_axis(validation_curve(rows), step_equivalents(run.path))
    if len(curve) < 2 or min(curve) != 0:
        raise ValueError(f"{run.path}: needs validations at step 0 and later, got steps {sorted(curve)}")
    training = [r for r in rows if int(r["step"]) > 0 and SIGNAL_NUM_RESPONSES in r]
    result = _read_json(run.path / "result.json") or _read_json(run.path / USAGE)
    summary = _read_json(run.path / SUMMARY)
    generated = sum(float(r.get(names.GENERATED_SAMPLES, r[SIGNAL_NUM_RESPONSES])) for r in training)
    useful = sum(float(r[SIGNAL_FRAC_NONZERO_ADV]) * float(r[SIGNAL_NUM_RESPONSES]) for r in training)
    row: dict[str, Any] = {
        "run": run.name,
        "phase": run.phase,
        "trainer": run.trainer,
        "method": run.method,
        "seed": run.seed,
        "lr": run.lr,
        "steps": len(training),
        "val_steps": " ".join(str(s) for s in sorted(curve)),
        **_curve_stats(curve, tasks),
        "wall_s": float(summary.get("wall_s", math.nan)),
        "cpu_s": float(result.get("cpu_s", math.nan)),
        "train_cpu_s": sum(float(r.get(names.PERF_STEP_CPU_S, 0.0)) for r in training) or math.nan,
        "val_cpu_s": sum(float(r.get(names.PERF_VAL_CPU_S, 0.0)) for r in rows) or math.nan,
        "generated_samples": generated,
        "useful_samples": useful,
    }
    return row, curve


def block_rows(
    run: PlannedRun, tasks: Sequence[str], source_prefix: str, block_steps: int
) -> list[dict[str, Any]]:
    """Per block of ``block_steps`` steps and task: shares of all-correct, all-wrong, zero-variance groups.

    Shares pool the block's generated groups (each step's share weighted by its group count).
    """
    rows = [r for r in read_metrics_jsonl(run.path / "metrics.jsonl") if int(r["step"]) > 0]
    out = []
    for task in (*tasks, ALL):
        prefix = names.group_prefix(task if task == ALL else f"{source_prefix}{task}")
        blocks: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if prefix + "count" in r:
                blocks[(int(r["step"]) - 1) // block_steps].append(r)
        for block, members in sorted(blocks.items()):
            count = sum(float(m[prefix + "count"]) for m in members)

            def pooled(
                key: str, members: list[dict[str, Any]] = members, count: float = count, prefix: str = prefix
            ) -> float:
                return sum(float(m[prefix + key]) * float(m[prefix + "count"]) for m in members) / count

            out.append(
                {
                    "run": run.name,
                    "phase": run.phase,
                    "method": run.method,
                    "seed": run.seed,
                    "task": task,
                    "first_step": block * block_steps + 1,
                    "last_step": block * block_steps + len(members),
                    "groups": int(count),
                    "all_correct": pooled("all_correct"),
                    "all_wrong": pooled("all_wrong"),
                    "zero_variance": pooled("zero_variance"),
                    "accuracy": pooled("accuracy"),
                }
            )
    return out


def step_curves(runs: Sequence[PlannedRun], tasks: Sequence[str], source_prefix: str) -> list[dict[str, Any]]:
    """Per (phase, method, step, task): generated-group shares and training accuracy, mean over seeds."""
    acc: dict[tuple[str, str, int, str], list[list[float]]] = defaultdict(list)
    for run in runs:
        if run.trainer != "fast":
            continue
        for r in read_metrics_jsonl(run.path / "metrics.jsonl"):
            step = int(r["step"])
            for task in (*tasks, ALL):
                prefix = names.group_prefix(task if task == ALL else f"{source_prefix}{task}")
                if prefix + "count" in r:
                    acc[(run.phase, run.method, step, task)].append(
                        [
                            float(r[prefix + k])
                            for k in ("all_correct", "all_wrong", "zero_variance", "accuracy")
                        ]
                    )
    out = []
    for (phase, method, step, task), values in sorted(acc.items()):
        mean = np.mean(np.asarray(values), axis=0)
        out.append(
            {
                "phase": phase,
                "method": method,
                "step": step,
                "task": task,
                "seeds": len(values),
                "all_correct": float(mean[0]),
                "all_wrong": float(mean[1]),
                "zero_variance": float(mean[2]),
                "accuracy": float(mean[3]),
            }
        )
    return out


def auc_units(correct: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """(P,) integer trapezoid sums ``c_0 + 2 c_1 + ... + c_{V-1}`` of a (V, P) count matrix.

    Raises:
        ValueError: when the validations are not equally spaced (the units would not be one scale).
    """
    gaps = np.diff(steps)
    if len(gaps) < 1 or np.any(gaps != gaps[0]):
        raise ValueError(f"problem AUC units need equally spaced validations, got steps {steps.tolist()}")
    weights = np.full(len(steps), 2, dtype=np.int64)
    weights[0] = weights[-1] = 1
    return (correct.astype(np.int64) * weights[:, None]).sum(axis=0)


def problem_columns(
    runs: Sequence[PlannedRun], problems: Sequence[ValProblem]
) -> tuple[list[dict[str, Any]], int, int]:
    """``problems.csv`` rows (one per problem; a column per run) and the units' k and V."""
    table = [{"row": p.row, "task": p.task, "level": p.level} for p in problems]
    ks, vs = set(), set()
    for run in runs:
        data = np.load(run.path / "validation.npz")
        correct, steps = units_on_step_axis(data["correct"], data["steps"], step_equivalents(run.path))
        units = auc_units(correct, steps)
        if len(units) != len(problems):
            raise ValueError(f"{run.path}: {len(units)} validation problems, the testbed has {len(problems)}")
        ks.add(int(data["n"]))
        vs.add(len(steps))
        for row, u in zip(table, units.tolist(), strict=True):
            row[run.name] = int(u)
    if len(ks) > 1 or len(vs) > 1:
        raise ValueError(f"problems.csv: runs differ in k {ks} or number of validations {vs}")
    return table, ks.pop(), vs.pop()


def collect(
    plan: StudyPlan,
    runs: Sequence[PlannedRun],
    problems: Sequence[ValProblem],
    out_dir: Path,
    prefix: str = "",
) -> dict[str, Any]:
    """Write the CSVs (names prefixed with ``prefix``) for ``runs`` of ``plan``; returns the rows written.

    The plan gives the rows' ``data_source`` prefix (``testbed2/``) and the blocks' length.
    """
    tasks = sorted({p.task for p in problems})
    run_rows, val_rows, blocks = [], [], []
    for run in runs:
        row, curve = run_row(run, tasks)
        run_rows.append(row)
        for step, per_task in sorted(curve.items()):
            for task, value in per_task.items():
                val_rows.append(
                    {
                        "run": run.name,
                        "phase": run.phase,
                        "trainer": run.trainer,
                        "method": run.method,
                        "seed": run.seed,
                        "step": step,
                        "task": task,
                        "accuracy": value,
                    }
                )
        if run.trainer == "fast":
            blocks += block_rows(run, tasks, plan.source_prefix, plan.block_steps)
    run_columns = list(run_rows[0])
    write_csv(out_dir / f"{prefix}runs.csv", run_rows, run_columns)
    write_csv(out_dir / f"{prefix}validation.csv", val_rows, list(val_rows[0]))
    if blocks:
        write_csv(out_dir / f"{prefix}blocks.csv", blocks, list(blocks[0]))
    curves = step_curves(runs, tasks, plan.source_prefix)
    if curves:
        write_csv(out_dir / f"{prefix}curves.csv", curves, list(curves[0]))
    mechanism = mechanism_rows(runs)
    if mechanism:  # runs from before the mechanism metrics have none: no file
        write_csv(out_dir / f"{prefix}mechanism.csv", mechanism, list(MECHANISM_COLUMNS))
    confirmatory = [r for r in runs if r.phase == "confirmatory"]
    written: dict[str, Any] = {
        "runs": run_rows,
        "validation": val_rows,
        "blocks": blocks,
        "curves": curves,
        "mechanism": mechanism,
    }
    if confirmatory:
        table, k, v = problem_columns(confirmatory, problems)
        write_csv(out_dir / f"{prefix}problems.csv", table, list(table[0]))
        (out_dir / f"{prefix}problems.json").write_text(
            json.dumps({"k": k, "validations": v}, indent=2) + "\n"
        )
        written["problems"] = table
    return written
