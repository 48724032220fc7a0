"""The regime map's figure (``regime_map.png``): per regime, at its target share of all-wrong groups at step
0, the paired AUC difference against GRPO of the paper's setting and of this project's variant, with
their 95% t-intervals (``regime_map.Row``, from the regimes' committed ``runs.csv``)."""

from __future__ import annotations

from pathlib import Path

from recipe.study.plots import METHOD_COLORS, pyplot
from recipe.study.testbed4.regime_map import Row


def plot_regime_map(rows: list[Row], out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    against_baseline = sorted({r.treatment for r in rows if r.against_baseline})
    for i, method in enumerate(against_baseline):
        mine = sorted((r for r in rows if r.treatment == method and r.against_baseline), key=lambda r: r.target)
        x = [100 * r.target + (i - (len(against_baseline) - 1) / 2) for r in mine]  # side by side, not on top
        y = [100 * r.mean for r in mine]
        err = [[100 * (r.mean - r.low) for r in mine], [100 * (r.high - r.mean) for r in mine]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=METHOD_COLORS[method], label=f"{method} - {mine[0].baseline}")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("target share of all-wrong groups at step 0 (%)")
    ax.set_ylabel("AUC difference against GRPO (points)")
    ax.set_title("regime map: paired over the confirmatory seeds, 95% t-interval")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
