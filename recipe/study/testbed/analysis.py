"""Summaries of the testbed study: per-run curve statistics, per-method CIs, paired differences vs GRPO.

Inputs are the run folders the driver wrote (``metrics.jsonl``, ``summary.json``); outputs are small
CSVs and a markdown summary (committed under ``docs/study_cpu/testbed/``):

* ``steps.csv``: one row per run and logged step (validation accuracy, signal budget, times);
* ``runs.csv``: one row per run: final accuracy, AUC, steps to threshold, times;
* ``summary.csv``: one row per method and statistic: mean and bootstrap 95% CI over seeds, and the
  paired difference to the baseline (same seed) with its CI and whether the CI excludes 0;
* ``signal.csv``: the signal budget (``signal/*``) and wall times per method;
* ``summary.md``: the tables of docs/STUDY_CPU.md and a plain statement of what is significant.

Statistics: ``recipe.stats``. The threshold of "steps to threshold" is the run's own step-0
accuracy plus ``threshold_gain``; a run that never reaches it is censored at the budget plus one
validation interval (see ``recipe.stats``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe import stats
from recipe.study.methods import BASELINE
from recipe.study.steps import STEP_COLUMNS, step_rows, write_csv
from recipe.study.testbed.runs import run_name
from recipe.tracking import names

# "steps to threshold": first validated step at >= step-0 accuracy + this many accuracy points.
THRESHOLD_GAIN = 0.05
TEST_TIME_KEY = names.TEST_TIME
STATISTICS = (
    ("final_acc", "final accuracy", 100, "%"),
    ("auc", "area under the curve (mean accuracy over training)", 100, "%"),
    ("steps_to_threshold", "steps to threshold", 1, "steps"),
)


@dataclass
class RunResult:
    """A finished run: its step rows and its ``summary.json``."""

    method: str
    seed: int
    rows: list[dict[str, Any]]
    summary: dict[str, Any]

    @property
    def curve(self) -> tuple[list[int], list[float]]:
        points = [(r["step"], r["val_acc"]) for r in self.rows if "val_acc" in r]
        return [s for s, _ in points], [a for _, a in points]

    @property
    def training(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["step"] > 0 and "num_responses" in r]


def load_runs(runs_dir: Path, methods: Sequence[str], seeds: Sequence[int]) -> list[RunResult]:
    """Finished runs (``summary.json`` present) of the plan, in plan order; unfinished ones are left out."""
    out = []
    for seed in seeds:
        for method in methods:
            run_dir = runs_dir / run_name(method, seed)
            summary_path = run_dir / "summary.json"
            if not summary_path.is_file():
                continue
            rows = step_rows(run_dir, method, seed, {"val_time_s": TEST_TIME_KEY})
            out.append(RunResult(method, seed, rows, json.loads(summary_path.read_text())))
    return out


def run_statistics(run: RunResult, threshold_gain: float, test_freq: int) -> dict[str, Any]:
    """Final accuracy, AUC and steps to threshold of one run, with its times.

    Raises:
        ValueError: when the run has no step-0 validation or fewer than two validations.
    """
    steps, acc = run.curve
    if len(steps) < 2 or steps[0] != 0:
        raise ValueError(
            f"{run_name(run.method, run.seed)}: needs validation at step 0 and later, got steps {steps}"
        )
    budget = int(run.summary.get("steps", steps[-1]))
    threshold = acc[0] + threshold_gain
    reached = stats.steps_to_threshold(steps, acc, threshold)
    training = run.training
    val_times = [r["val_time_s"] for r in run.rows if "val_time_s" in r]
    step_times = [r["step_time_s"] for r in training if "step_time_s" in r]
    return {
        "run": run_name(run.method, run.seed),
        "method": run.method,
        "seed": run.seed,
        "steps": budget,
        "start_acc": acc[0],
        "final_acc": acc[-1],
        "final_step": steps[-1],
        "auc": stats.auc(steps, acc),
        "threshold": threshold,
        "steps_to_threshold": reached if reached is not None else float(budget + test_freq),
        "reached_threshold": reached is not None,
        "mean_step_s": statistics.fmean(step_times) if step_times else math.nan,
        "train_s": sum(step_times),
        "val_s_each": statistics.fmean(val_times) if val_times else math.nan,
        "run_wall_s": float(run.summary.get("wall_s", math.nan)),
    }


def method_summary(
    per_run: Sequence[dict[str, Any]], methods: Sequence[str], baseline: str = BASELINE, seed: int = 0
) -> list[dict[str, Any]]:
    """Per method and statistic: mean and bootstrap CI over seeds; paired difference to ``baseline``."""
    by_method: dict[str, dict[int, dict[str, Any]]] = {}
    for row in per_run:
        by_method.setdefault(row["method"], {})[int(row["seed"])] = row
    base = by_method.get(baseline, {})
    out = []
    for method in methods:
        runs = by_method.get(method)
        if not runs:
            continue
        for key, _, _, _ in STATISTICS:
            values = {s: float(r[key]) for s, r in runs.items()}
            ci = stats.bootstrap_ci(list(values.values()), seed=seed)
            row: dict[str, Any] = {
                "method": method,
                "statistic": key,
                "seeds": ci.n,
                "mean": ci.mean,
                "ci_low": ci.low,
                "ci_high": ci.high,
            }
            if key == "steps_to_threshold":
                row["reached"] = sum(bool(r["reached_threshold"]) for r in runs.values())
            if method != baseline and base:
                _, diffs = stats.paired_differences(values, {s: float(r[key]) for s, r in base.items()})
                diff = stats.bootstrap_ci(diffs, seed=seed)
                row.update(
                    paired_seeds=diff.n,
                    diff_mean=diff.mean,
                    diff_low=diff.low,
                    diff_high=diff.high,
                    significant=diff.excludes_zero,
                )
            out.append(row)
    return out


SIGNAL_KEYS = (
    "frac_nonzero_adv",
    "frac_groups_all_correct",
    "frac_groups_all_wrong",
    "frac_groups_zero_variance",
)


def signal_summary(
    runs: Sequence[RunResult], per_run: Sequence[dict[str, Any]], methods: Sequence[str]
) -> list[dict[str, Any]]:
    """Per method: signal/* averaged over training steps then seeds, generated per useful response, times."""
    out = []
    for method in methods:
        mine = [r for r in runs if r.method == method]
        if not mine:
            continue
        row: dict[str, Any] = {"method": method, "seeds": len(mine)}
        for key in SIGNAL_KEYS:
            per_seed = [statistics.fmean(s[key] for s in r.training if key in s) for r in mine if r.training]
            row[key] = statistics.fmean(per_seed) if per_seed else math.nan
        ratios = []
        for r in mine:
            generated = sum(s["generated_samples"] for s in r.training)
            useful = sum(s["useful_samples"] for s in r.training)
            ratios.append(generated / useful if useful else math.inf)
        row["generated_per_useful"] = statistics.fmean(ratios)
        stats_rows = [p for p in per_run if p["method"] == method]
        for key in ("mean_step_s", "train_s", "val_s_each", "run_wall_s"):
            row[key] = statistics.fmean(p[key] for p in stats_rows)
        out.append(row)
    return out


def _pct(value: float, scale: int) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value * scale:.1f}"


def _interval(mean: float, low: float, high: float, scale: int, signed: bool = False) -> str:
    if any(math.isnan(v) for v in (mean, low, high)):
        return "n/a"
    sign = "+" if signed else ""
    return f"{mean * scale:{sign}.1f} [{low * scale:{sign}.1f}, {high * scale:{sign}.1f}]"


def significance_lines(summary: Sequence[dict[str, Any]], baseline: str = BASELINE) -> list[str]:
    """One plain sentence per method and statistic: is the paired difference to the baseline significant?"""
    lines = []
    for row in summary:
        if "diff_mean" not in row:
            continue
        title = next(t for k, t, _, _ in STATISTICS if k == row["statistic"])
        scale = next(s for k, _, s, _ in STATISTICS if k == row["statistic"])
        unit = "points" if scale == 100 else "steps"
        if int(row["paired_seeds"]) < 2:
            verdict = "no verdict (an interval needs at least 2 paired seeds)"
        elif row["significant"]:
            verdict = "significant (the 95% CI excludes 0)"
        else:
            verdict = "not significant (the 95% CI contains 0)"
        lines.append(
            f"- {row['method']} vs {baseline}, {title}: {row['diff_mean'] * scale:+.1f} {unit} "
            f"[{row['diff_low'] * scale:+.1f}, {row['diff_high'] * scale:+.1f}] over {row['paired_seeds']} paired seeds: {verdict}."
        )
    return lines


def markdown(
    summary: Sequence[dict[str, Any]],
    signal: Sequence[dict[str, Any]],
    threshold_gain: float,
    budget_note: str,
) -> str:
    """The results section's tables (percent, mean [95% CI]) and the significance statement."""
    out = [budget_note, ""]
    head = "| method | seeds | " + " | ".join(
        f"{title} ({unit}) | vs {BASELINE}" for _, title, _, unit in STATISTICS
    )
    out += [head + " |", "|" + "---|" * (2 + 2 * len(STATISTICS))]
    methods = list(dict.fromkeys(r["method"] for r in summary))
    for method in methods:
        rows = {r["statistic"]: r for r in summary if r["method"] == method}
        cells = [method, str(next(iter(rows.values()))["seeds"])]
        for key, _, scale, _ in STATISTICS:
            r = rows[key]
            value = _interval(r["mean"], r["ci_low"], r["ci_high"], scale)
            if key == "steps_to_threshold":
                value += f" ({r['reached']}/{r['seeds']} reached)"
            cells.append(value)
            if "diff_mean" in r:
                star = " *" if r["significant"] else ""
                cells.append(
                    _interval(r["diff_mean"], r["diff_low"], r["diff_high"], scale, signed=True) + star
                )
            else:
                cells.append("(baseline)")
        out.append("| " + " | ".join(cells) + " |")
    out += [
        "",
        f"Mean over seeds [95% percentile-bootstrap CI]; `vs {BASELINE}`: mean paired difference (same seed) "
        "[95% CI], `*` where the CI excludes 0. Steps to threshold: first validated step at or above the "
        f"step-0 accuracy + {threshold_gain * 100:.0f} points; a run that never reaches it counts as the "
        "budget + one validation interval (so the mean is a lower bound when some did not reach it).",
        "",
        "| method | seeds | non-zero adv (%) | all correct (%) | all wrong (%) | zero variance (%) "
        "| generated / useful | step (s) | training (min) | one validation (s) | run incl. start-up (min) |",
        "|" + "---|" * 11,
    ]
    for r in signal:
        out.append(
            f"| {r['method']} | {r['seeds']} | {_pct(r['frac_nonzero_adv'], 100)} | "
            f"{_pct(r['frac_groups_all_correct'], 100)} | {_pct(r['frac_groups_all_wrong'], 100)} | "
            f"{_pct(r['frac_groups_zero_variance'], 100)} | {r['generated_per_useful']:.2f} | "
            f"{r['mean_step_s']:.1f} | {r['train_s'] / 60:.1f} | {r['val_s_each']:.1f} | {r['run_wall_s'] / 60:.1f} |"
        )
    out += ["", "**What is significant.**", "", *significance_lines(summary)]
    return "\n".join(out) + "\n"


def summarize(
    runs_dir: Path,
    out_dir: Path,
    methods: Sequence[str],
    seeds: Sequence[int],
    test_freq: int,
    threshold_gain: float = THRESHOLD_GAIN,
    budget_note: str = "",
) -> dict[str, Any]:
    """Write steps.csv, runs.csv, summary.csv, signal.csv and summary.md into ``out_dir``."""
    runs = load_runs(runs_dir, methods, seeds)
    if not runs:
        raise SystemExit(f"study testbed: no finished run (summary.json) under {runs_dir}")
    per_run = [run_statistics(r, threshold_gain, test_freq) for r in runs]
    summary = method_summary(per_run, methods)
    signal = signal_summary(runs, per_run, methods)
    steps = [row for r in runs for row in r.rows]
    step_columns = ["run", "method", "seed", "step", "train_wall_s", "val_acc", *STEP_COLUMNS, "val_time_s"]
    write_csv(out_dir / "steps.csv", steps, step_columns + ["generated_samples", "useful_samples"])
    write_csv(out_dir / "runs.csv", per_run, list(per_run[0]))
    summary_columns = ["method", "statistic", "seeds", "mean", "ci_low", "ci_high", "reached"]
    summary_columns += ["paired_seeds", "diff_mean", "diff_low", "diff_high", "significant"]
    write_csv(out_dir / "summary.csv", summary, summary_columns)
    write_csv(out_dir / "signal.csv", signal, list(signal[0]))
    (out_dir / "summary.md").write_text(markdown(summary, signal, threshold_gain, budget_note))
    return {"runs": per_run, "summary": summary, "signal": signal}
