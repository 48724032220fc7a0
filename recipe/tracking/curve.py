"""One run's learning curve in one small PNG: training reward per step, validation accuracy before and after.

Drawn from the run's ``metrics.jsonl`` alone (the recipe's writer: ``critic/score/mean`` per training step,
verl's ``val-core/<data_source>/acc/mean@N`` at the validated steps), so any run of ``main_copo`` or the
quick start can be drawn; ``python scripts/plot_run.py --curve RUN`` is the command line. README's figure
(``docs/figures/quickstart_curve.png``) is this figure of a real quick-start run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from recipe.tracking import names
from recipe.tracking.training import Metrics, read_training_metrics, sorted_series, validation_accuracy

CURVE_FILE = "quickstart_curve.png"


def curve_data(metrics: Metrics) -> tuple[dict[int, float], dict[str, dict[int, float]]]:
    """(training reward per step, {data_source: validation accuracy per validated step}).

    Raises:
        ValueError: the metrics hold no training reward (not a training run's metrics).
    """
    reward = metrics.get(names.SCORE_MEAN, {})
    if not reward:
        raise ValueError(f"no {names.SCORE_MEAN} in the metrics: not a training run's metrics.jsonl")
    validation = {}
    for dataset, curves in sorted(validation_accuracy(metrics).items()):
        mean_key = next((k for k in sorted(curves) if k.startswith("mean@")), None)
        if mean_key is not None:
            validation[dataset] = curves[mean_key]
    return reward, validation


def plot_curve(run: str | Path, out_dir: str | Path, setup_matplotlib: Callable) -> Path:
    """Draw ``out_dir/quickstart_curve.png`` from ``run`` (a metrics.jsonl or a run folder holding one)."""
    run = Path(run)
    path = run / "metrics.jsonl" if run.is_dir() and (run / "metrics.jsonl").is_file() else run
    reward, validation = curve_data(read_training_metrics(path))
    plt = setup_matplotlib()
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), dpi=100)
    steps, values = sorted_series(reward)
    left.plot(steps, values, marker="o", color="C0")
    left.set_title("training reward per step")
    left.set_xlabel("training step")
    left.set_ylabel(f"mean score ({names.SCORE_MEAN})")
    left.set_ylim(-0.02, 1.02)
    for i, (dataset, series) in enumerate(validation.items()):
        vsteps, vvalues = sorted_series(series)
        right.plot(
            vsteps, vvalues, marker="s", linestyle="--", color=f"C{i + 1}", label=dataset.split("/")[-1]
        )
        for s, v in zip(vsteps, vvalues, strict=True):
            right.annotate(f"{v:.2f}", (s, v), textcoords="offset points", xytext=(4, 4), fontsize=8)
    right.set_title("greedy validation accuracy, before and after")
    right.set_xlabel("training step")
    right.set_ylim(-0.02, 1.02)
    right.margins(x=0.12)  # room for the value labels beside the last point
    if validation:
        right.legend(fontsize=8, loc="lower right")
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / CURVE_FILE
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target
