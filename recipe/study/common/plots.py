"""Figures of a testbed study from its committed CSVs (``validation.csv``, ``curves.csv``) and its plan.

* ``<name>_accuracy.png``: validation mean@k over training per method (mean over the confirmatory
  seeds, with the seeds' min-max band); one panel for a one-task plan, else one per task and overall;
* ``<name>_regime.png``: the shares of zero-variance, all-correct and all-wrong groups among the groups
  each step generated, per method (mean over seeds, smoothed over the plan's block of steps); one row
  per panel as above.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from recipe.study.common.plan import StudyPlan
from recipe.study.plots import METHOD_COLORS as COLORS
from recipe.study.plots import pyplot

REGIME_KEYS = (("zero_variance", "zero variance"), ("all_correct", "all correct"), ("all_wrong", "all wrong"))


def panels(plan: StudyPlan) -> tuple[str, ...]:
    """The ``task`` values drawn: ``all`` alone for a one-task plan (its shares are the task's)."""
    return ("all",) if len(plan.tasks) == 1 else (*plan.tasks, "all")


def plot_accuracy(plan: StudyPlan, validation: pd.DataFrame, out: Path) -> None:
    plt = pyplot()
    tasks = panels(plan)
    val = validation[validation.phase == "confirmatory"]
    seeds = len(set(val.seed))
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(6 if len(tasks) == 1 else 4 * len(tasks), 3.8), squeeze=False
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        for method in plan.methods:
            v = val[(val.method == method) & (val.task == task)]
            if v.empty:
                continue
            g = v.groupby("step").accuracy
            steps = np.array(sorted(v.step.unique()))
            ax.plot(steps, 100 * g.mean().loc[steps], color=COLORS[method], marker=".", label=method)
            ax.fill_between(
                steps, 100 * g.min().loc[steps], 100 * g.max().loc[steps], color=COLORS[method], alpha=0.1
            )
        where = "" if len(tasks) == 1 else f", {task}"
        ax.set_title(f"validation mean@k{where} ({seeds} seeds; band: min-max)")
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy (%)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_regime(plan: StudyPlan, curves: pd.DataFrame, out: Path, window: int | None = None) -> None:
    plt = pyplot()
    tasks = panels(plan)
    window = plan.block_steps if window is None else window
    cur = curves[(curves.phase == "confirmatory") & (curves.step > 0)]
    fig, axes = plt.subplots(
        len(tasks), len(REGIME_KEYS), figsize=(12, 3.4 * len(tasks)), sharey=True, squeeze=False
    )
    for row, task in enumerate(tasks):
        named = f"task {plan.tasks[0]}" if len(tasks) == 1 else task
        for ax, (key, label) in zip(axes[row], REGIME_KEYS, strict=True):
            for method in plan.methods:
                c = cur[(cur.method == method) & (cur.task == task)].sort_values("step")
                if len(c):
                    ax.plot(
                        c.step,
                        100 * c[key].rolling(window, min_periods=1).mean(),
                        color=COLORS[method],
                        label=method,
                    )
            ax.set_title(f"{label} groups ({named})")
            if row == len(tasks) - 1:
                ax.set_xlabel("step")
        axes[row][0].set_ylabel("% of generated groups")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_all(plan: StudyPlan, docs: Path) -> None:
    plot_accuracy(plan, pd.read_csv(docs / "validation.csv"), docs / f"{plan.name}_accuracy.png")
    plot_regime(plan, pd.read_csv(docs / "curves.csv"), docs / f"{plan.name}_regime.png")
