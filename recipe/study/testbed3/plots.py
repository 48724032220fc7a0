"""Figures of the testbed v3 study from its committed CSVs (``validation.csv``, ``curves.csv``).

* ``testbed3_accuracy.png``: validation mean@k over training per method (mean over the confirmatory
  seeds, with the seeds' min-max band);
* ``testbed3_regime.png``: the shares of zero-variance, all-correct and all-wrong groups among the groups
  each step generated, per method (mean over seeds, smoothed over the plan's block of steps).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from recipe.study.plots import METHOD_COLORS as COLORS
from recipe.study.plots import pyplot
from recipe.study.testbed3 import plan


def plot_accuracy(validation: pd.DataFrame, out: Path) -> None:
    plt = pyplot()
    val = validation[(validation.phase == "confirmatory") & (validation.task == "all")]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for method in plan.METHODS:
        v = val[val.method == method]
        if v.empty:
            continue
        g = v.groupby("step").accuracy
        steps = np.array(sorted(v.step.unique()))
        ax.plot(steps, 100 * g.mean().loc[steps], color=COLORS[method], marker=".", label=method)
        ax.fill_between(
            steps, 100 * g.min().loc[steps], 100 * g.max().loc[steps], color=COLORS[method], alpha=0.1
        )
    ax.set_title(f"validation mean@k ({len(set(val.seed))} seeds; band: min-max)")
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_regime(curves: pd.DataFrame, out: Path, window: int = plan.BLOCK_STEPS) -> None:
    plt = pyplot()
    cur = curves[(curves.phase == "confirmatory") & (curves.step > 0) & (curves.task == "all")]
    keys = (("zero_variance", "zero variance"), ("all_correct", "all correct"), ("all_wrong", "all wrong"))
    fig, axes = plt.subplots(1, len(keys), figsize=(12, 3.4), sharey=True)
    for ax, (key, label) in zip(axes, keys, strict=True):
        for method in plan.METHODS:
            c = cur[cur.method == method].sort_values("step")
            if len(c):
                ax.plot(
                    c.step,
                    100 * c[key].rolling(window, min_periods=1).mean(),
                    color=COLORS[method],
                    label=method,
                )
        ax.set_title(f"{label} groups (task max)")
        ax.set_xlabel("step")
    axes[0].set_ylabel("% of generated groups")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_all(docs: Path) -> None:
    plot_accuracy(pd.read_csv(docs / "validation.csv"), docs / "testbed3_accuracy.png")
    plot_regime(pd.read_csv(docs / "curves.csv"), docs / "testbed3_regime.png")
