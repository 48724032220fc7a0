"""The testbed v2 study's own figure: its exploration probes (``testbed2_exploration.png``), from the
committed ``exploration_validation.csv``. The figures every study draws: ``recipe.study.common.plots``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recipe.study.plots import pyplot


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
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
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
