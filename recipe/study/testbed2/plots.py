"""Figures of the testbed v2 study from its committed CSVs (``validation.csv``, ``curves.csv``).

* ``testbed2_accuracy.png``: validation mean@k per task (and overall) over training, per method:
  mean over the confirmatory seeds with the seeds' min-max band.
* ``testbed2_regime.png``: per task, the shares of all-correct, all-wrong and zero-variance groups
  among the groups each step generated, per method (mean over seeds, smoothed over 10 steps).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from recipe.study.plots import METHOD_COLORS as COLORS
from recipe.study.plots import pyplot
from recipe.study.testbed2 import plan

TASKS = ("add", "max", "all")


def plot_accuracy(validation: pd.DataFrame, out: Path) -> None:
    plt = pyplot()
    val = validation[validation.phase == "confirmatory"]
    fig, axes = plt.subplots(1, len(TASKS), figsize=(12, 3.4), sharey=False)
    for ax, task in zip(axes, TASKS, strict=True):
        for method in plan.METHODS:
            v = val[(val.method == method) & (val.task == task)]
            if v.empty:
                continue
            g = v.groupby("step").accuracy
            steps = np.array(sorted(v.step.unique()))
            ax.plot(steps, 100 * g.mean().loc[steps], color=COLORS[method], label=method)
            ax.fill_between(
                steps, 100 * g.min().loc[steps], 100 * g.max().loc[steps], color=COLORS[method], alpha=0.12
            )
        ax.set_title(f"validation mean@k, {task}")
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy (%)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_regime(curves: pd.DataFrame, out: Path, window: int = plan.BLOCK_STEPS) -> None:
    plt = pyplot()
    cur = curves[(curves.phase == "confirmatory") & (curves.step > 0)]
    keys = (("zero_variance", "zero variance"), ("all_correct", "all correct"), ("all_wrong", "all wrong"))
    fig, axes = plt.subplots(len(keys), len(TASKS), figsize=(12, 7.5), sharex=True, sharey=True)
    for row, (key, label) in enumerate(keys):
        for col, task in enumerate(TASKS):
            ax = axes[row][col]
            for method in plan.METHODS:
                c = cur[(cur.method == method) & (cur.task == task)].sort_values("step")
                if c.empty:
                    continue
                smooth = c[key].rolling(window, min_periods=1).mean()
                ax.plot(c.step, 100 * smooth, color=COLORS[method], label=method)
            ax.set_title(f"{label}, {task}")
            if row == len(keys) - 1:
                ax.set_xlabel("step")
            if col == 0:
                ax.set_ylabel("% of generated groups")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_all(docs: Path) -> None:
    plot_accuracy(pd.read_csv(docs / "validation.csv"), docs / "testbed2_accuracy.png")
    plot_regime(pd.read_csv(docs / "curves.csv"), docs / "testbed2_regime.png")


def plot_exploration(validation_csv: Path, out: Path) -> None:
    """Validation gain over step 0 (all tasks, add, max) of every exploration run on held-out problems.

    The ``small16`` probes validate on their own 16 training prompts (a check that the trainer moves the
    policy), so they are left out of the figure; ``exploration_runs.csv`` has them.
    """
    plt = pyplot()
    val = pd.read_csv(validation_csv)
    val = val[~val.run.str.startswith("small16")]
    runs = list(dict.fromkeys(val.run))
    colors = {run: plt.get_cmap("tab20")(i % 20) for i, run in enumerate(runs)}
    fig, axes = plt.subplots(1, len(TASKS), figsize=(13, 3.8))
    for ax, task in zip(axes, ("all", "add", "max"), strict=True):
        for run in runs:
            v = val[(val.run == run) & (val.task == task)].sort_values("step")
            if len(v):
                ax.plot(
                    v.step, 100 * (v.accuracy - v.accuracy.iloc[0]), marker=".", color=colors[run], label=run
                )
        ax.axhline(10, color="grey", ls="--", lw=0.8)
        ax.set_title(f"validation mean@4 gain over step 0, {task}")
        ax.set_xlabel("step")
        ax.set_ylabel("points")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
