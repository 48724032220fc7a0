"""Summaries of the SmolLM2 CPU study: ``steps.csv`` (one row per run and step), ``summary.csv`` and
``summary.md`` (one row per method: mean and sample std over seeds).

Step-0 validation scores the initial model, which every method shares: only the first method's runs
measure it (recipe/study/smollm2.py), and :func:`summarize` copies it to the other runs of the seed.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from recipe.files import REPO_ROOT
from recipe.study.steps import STEP_COLUMNS, step_rows, write_csv


def run_name(method: str, seed: int) -> str:
    return f"{method}-s{seed}"


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _runs_with_baseline(
    runs: Path, methods: list[str], seeds: list[int]
) -> tuple[list[dict[str, Any]], dict[str, list[list[dict[str, Any]]]]]:
    """Every run's step rows (a step-0 row copied from the seed's baseline where it has none), by method."""
    all_rows: list[dict[str, Any]] = []
    per_method: dict[str, list[list[dict[str, Any]]]] = {}
    baseline: dict[int, tuple[float, str]] = {}  # seed -> (step-0 val_acc, run that measured it)
    for method in methods:
        for seed in seeds:
            run_dir = runs / run_name(method, seed)
            if not (run_dir / "metrics.jsonl").is_file():
                continue
            rows = step_rows(run_dir, method, seed)
            if not any(r["step"] > 0 and "num_responses" in r for r in rows):
                print(f"[study] {run_dir.name}: no training step logged yet, left out")
                continue
            if rows[0]["step"] == 0 and "val_acc" in rows[0]:
                baseline.setdefault(seed, (rows[0]["val_acc"], run_dir.name))
            per_method.setdefault(method, []).append(rows)
    for runs_of_method in per_method.values():
        for rows in runs_of_method:
            seed = rows[0]["seed"] if rows else None
            if rows and seed in baseline and not (rows[0]["step"] == 0 and "val_acc" in rows[0]):
                acc, source = baseline[seed]
                if rows[0]["step"] != 0:
                    rows.insert(
                        0, {"run": rows[0]["run"], "method": rows[0]["method"], "seed": seed, "step": 0}
                    )
                rows[0].update(val_acc=acc, val_source=source, train_wall_s=0.0)
            all_rows.extend(rows)
    return all_rows, per_method


def _method_row(method: str, runs_of_method: list[list[dict[str, Any]]]) -> dict[str, Any]:
    start, end, gain, nonzero, correct0, wrong0, gen, useful, wall, steps = ([] for _ in range(10))
    correct_all, wrong_all = [], []
    for rows in runs_of_method:
        vals = [r for r in rows if "val_acc" in r]
        train = [r for r in rows if r["step"] > 0 and "num_responses" in r]
        if vals:
            start.append(vals[0]["val_acc"])
        if len(vals) >= 2:
            end.append(vals[-1]["val_acc"])
            gain.append(vals[-1]["val_acc"] - vals[0]["val_acc"])
        if train:
            nonzero.append(statistics.fmean(r["frac_nonzero_adv"] for r in train))
            correct0.append(train[0]["frac_groups_all_correct"])
            wrong0.append(train[0]["frac_groups_all_wrong"])
            correct_all.append(statistics.fmean(r["frac_groups_all_correct"] for r in train))
            wrong_all.append(statistics.fmean(r["frac_groups_all_wrong"] for r in train))
            generated = sum(r["generated_samples"] for r in train)
            used = sum(r["useful_samples"] for r in train)
            gen.append(generated / used if used else math.inf)
            useful.append(used)
            wall.append(train[-1]["train_wall_s"] / 60)
            steps.append(train[-1]["step"])
    row: dict[str, Any] = {"method": method, "seeds": len(runs_of_method), "steps": min(steps, default=0)}
    for name, values in (
        ("val_acc_start", start),
        ("val_acc_end", end),
        ("val_acc_gain", gain),
        ("frac_nonzero_adv", nonzero),
        ("step1_frac_all_correct", correct0),
        ("step1_frac_all_wrong", wrong0),
        ("frac_all_correct", correct_all),
        ("frac_all_wrong", wrong_all),
        ("generated_per_useful", gen),
        ("train_wall_min", wall),
    ):
        mean, std = _mean_std(values)
        row[f"{name}_mean"], row[f"{name}_std"] = round(mean, 4), round(std, 4)
    return row


def summarize(runs: Path, out_dir: Path, methods: list[str], seeds: list[int]) -> list[dict[str, Any]]:
    """Write ``steps.csv``, ``summary.csv`` and ``summary.md`` to ``out_dir``; return the summary rows."""
    all_rows, per_method = _runs_with_baseline(runs, methods, seeds)
    if not all_rows:
        raise SystemExit(f"study_cpu.py: no runs with metrics.jsonl under {runs}")
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = ["run", "method", "seed", "step", "train_wall_s", "val_acc", *STEP_COLUMNS]
    columns += ["generated_samples", "useful_samples", "val_source"]
    _write_csv(out_dir / "steps.csv", all_rows, columns)
    summary = [_method_row(method, runs_of_method) for method, runs_of_method in per_method.items()]
    _write_csv(out_dir / "summary.csv", summary, list(summary[0]))
    _write_markdown(out_dir / "summary.md", summary)
    return summary


_MD_COLUMNS = (
    ("val acc start", "val_acc_start", 100, ".1f"),
    ("val acc end", "val_acc_end", 100, ".1f"),
    ("gain (points)", "val_acc_gain", 100, "+.1f"),
    ("non-zero adv", "frac_nonzero_adv", 100, ".0f"),
    ("step-1 all correct", "step1_frac_all_correct", 100, ".0f"),
    ("step-1 all wrong", "step1_frac_all_wrong", 100, ".0f"),
    ("all correct, all steps", "frac_all_correct", 100, ".0f"),
    ("all wrong, all steps", "frac_all_wrong", 100, ".0f"),
    ("generated / useful", "generated_per_useful", 1, ".2f"),
    ("train min", "train_wall_min", 1, ".1f"),
)


def summary_markdown(summary: list[dict[str, Any]]) -> str:
    """The results table of docs/STUDY_CPU.md: mean +- sample std over seeds (percent where %)."""
    head = ["method", "seeds", "steps"] + [
        f"{title}{' (%)' if scale == 100 else ''}" for title, _, scale, _ in _MD_COLUMNS
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in summary:
        cells = [row["method"], str(row["seeds"]), str(row["steps"])]
        for _, key, scale, spec in _MD_COLUMNS:
            mean, std = row[f"{key}_mean"] * scale, row[f"{key}_std"] * scale
            cells.append("n/a" if math.isnan(mean) else f"{mean:{spec}} ± {abs(std):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _write_markdown(path: Path, summary: list[dict[str, Any]]) -> None:
    path.write_text(summary_markdown(summary))
    print(f"[study] wrote {path}")


def summary_from_steps(steps_csv: Path) -> list[dict[str, Any]]:
    """The per-method summary again, from the committed ``steps.csv`` alone (methods in file order)."""
    import csv

    text_columns = ("run", "method", "val_source")
    per_method: dict[str, dict[int, list[dict[str, Any]]]] = {}
    with open(steps_csv, newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for key, value in raw.items():
                if value == "":
                    continue
                row[key] = (
                    value
                    if key in text_columns
                    else (int(value) if key in ("seed", "step") else float(value))
                )
            per_method.setdefault(row["method"], {}).setdefault(row["seed"], []).append(row)
    return [_method_row(m, [runs[s] for s in sorted(runs)]) for m, runs in per_method.items()]


def figures(docs: Path = REPO_ROOT / "docs" / "study_cpu") -> dict[str, str]:
    """Every figure the docs state about the SmolLM2 study, from ``steps.csv`` (names without ``smollm2/``)."""
    summary = {row["method"]: row for row in summary_from_steps(docs / "steps.csv")}
    copo = [summary[m]["frac_nonzero_adv_mean"] for m in summary if m.startswith("copo")]
    base, dapo = summary["grpo"], summary["dapo_filter"]
    others = [summary[m]["train_wall_min_mean"] for m in summary if m != "dapo_filter"]
    from recipe.study.census import census_markdown, read_census

    return {
        "results": summary_markdown(list(summary.values())),
        "census": census_markdown(read_census(docs / "census.csv")),
        "readme": (
            f"Measured here ({base['steps']} steps x {base['seeds']} seeds): COPO gave a non-zero advantage to "
            f"{100 * min(copo):.0f}-{100 * max(copo):.0f}% of responses against GRPO's "
            f"{100 * base['frac_nonzero_adv_mean']:.0f}%, at no measurable step cost; DAPO filtering reached "
            f"{100 * dapo['frac_nonzero_adv_mean']:.0f}% by generating {dapo['generated_per_useful_mean']:.1f} responses "
            f"per useful one in {dapo['train_wall_min_mean'] / (sum(others) / len(others)):.1f}x the others' mean "
            "training time; accuracy differences stayed within the seed spread.\n"
        ),
    }


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    write_csv(path, rows, columns)
    print(f"[study] wrote {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}")
