"""The mechanism of a study's runs: run folders -> ``mechanism.csv``, and its table.

The fast trainer logs per step ``mechanism/`` metrics (``copo_core.wrong_answer_metrics``): the shares
of all-wrong, mixed and all-correct groups, and the mean advantage of wrong answers in all-wrong groups,
in mixed groups and per success bin of mixed groups, each with its count. ``mechanism.csv`` pools them
per (phase, method, step) over the seeds: shares averaged, means weighted by their counts, counts
summed. Runs written before the metrics existed have none: no rows, no file, and every existing CSV
keeps its columns (a study's report reads this file only when it is there).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from recipe.study.common.plan import StudyPlan
from recipe.study.common.reporting import pct
from recipe.tracking import names
from recipe.tracking.jsonl import read_metrics_jsonl


class RunFolder(Protocol):
    """What this module reads of a run (``recipe.study.common.collect.PlannedRun`` has it)."""

    phase: str
    trainer: str
    method: str
    path: Path


def column(name: str) -> str:
    """``mechanism/wrong_adv_mixed`` -> ``wrong_adv_mixed`` (the CSV's column)."""
    return name[len(names.MECHANISM_PREFIX) :]


COLUMNS = (
    "phase",
    "method",
    "step",
    "seeds",
    *(column(k) for k in names.MECHANISM_GROUP_SHARES),
    *(column(k) for pair in names.MECHANISM_WRONG_ADV for k in pair),
)


def pooled(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """One step's metrics of several seeds as one: shares averaged, means weighted by counts, counts summed."""
    out = {column(k): sum(float(r[k]) for r in rows) / len(rows) for k in names.MECHANISM_GROUP_SHARES}
    for mean_key, count_key in names.MECHANISM_WRONG_ADV:
        counted = [(float(r[mean_key]), float(r[count_key])) for r in rows if float(r[count_key] or 0) > 0]
        total = sum(c for _, c in counted)
        out[column(mean_key)] = sum(m * c for m, c in counted) / total if total else math.nan
        out[column(count_key)] = total
    return out


def mechanism_rows(runs: Sequence[RunFolder]) -> list[dict[str, Any]]:
    """``mechanism.csv`` rows: per (phase, method, step) of the fast runs that logged the metrics."""
    by: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if run.trainer != "fast":
            continue
        for r in read_metrics_jsonl(run.path / "metrics.jsonl"):
            if names.MECHANISM_NUM_WRONG_MIXED in r:
                by[(run.phase, run.method, int(r["step"]))].append(r)
    return [
        {"phase": phase, "method": method, "step": step, "seeds": len(rows), **pooled(rows)}
        for (phase, method, step), rows in sorted(by.items())
    ]


def mechanism_markdown(plan: StudyPlan, mechanism: pd.DataFrame, phase: str = "confirmatory") -> str:
    """Per method over all steps of ``phase``: the group kinds' shares, and the mean advantage of a wrong
    answer in all-wrong groups, in mixed groups and per success bin (weighted by the answers counted)."""
    rows = mechanism[mechanism.phase == phase]
    pairs = [(column(m), column(c)) for m, c in names.MECHANISM_WRONG_ADV]
    shares = [column(k) for k in names.MECHANISM_GROUP_SHARES]
    lines = [
        "| method | "
        + " | ".join(f"{s} (%)" for s in shares)
        + " | "
        + " | ".join(m for m, _ in pairs)
        + " |",
        "|---" * (1 + len(shares) + len(pairs)) + "|",
    ]
    for method in plan.methods:
        r = rows[rows.method == method]
        if r.empty:
            continue
        cells = [pct(float(r[s].mean())) for s in shares]
        for mean, count in pairs:
            total = float(r[count].sum())
            weighted = float((r[mean].fillna(0.0) * r[count]).sum()) / total if total else math.nan
            cells.append("n/a" if math.isnan(weighted) else f"{weighted:+.3f}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Shares: mean over the steps of the {phase} runs; advantages: mean over every wrong answer of those steps "
        "(a response's advantage as the actor reads it; mixed groups binned by the prompt's success, sNNN_MMM: "
        "NNN% <= success < MMM%).",
    ]
    return "\n".join(lines) + "\n"
