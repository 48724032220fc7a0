"""Figures of the CPU study (scripts/study_cpu.py) from its committed ``steps.csv``.

Each method is drawn as the mean over its seeds, with a band from the lowest to the highest
seed (the spread), so two seeds show their full range rather than a made-up interval.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

Row = dict[str, str]
# method -> seed -> {step: (x, y)}
Curves = dict[str, dict[str, dict[int, tuple[float, float]]]]

# the testbed studies' colour of each method (v2 and v3 figures)
METHOD_COLORS = {
    "grpo": "tab:blue",
    "copo_soft_with_zero": "tab:red",
    "copo_soft": "tab:orange",
    "dapo_filter": "tab:green",
    "copo_variant_nonpositive": "tab:purple",  # this project's variant (testbed v4)
}
SIGNAL_PANELS = (
    ("frac_nonzero_adv", "responses with non-zero advantage"),
    ("frac_groups_all_correct", "groups all correct"),
    ("frac_groups_all_wrong", "groups all wrong"),
    ("generated_per_useful", "generated samples per useful sample"),
)


def pyplot():
    """matplotlib's pyplot on the Agg backend with the testbed studies' figure style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9}
    )
    return plt


def read_steps(path: str | Path) -> list[Row]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist (write it with: python scripts/study_cpu.py summarize)"
        )
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = {"method", "seed", "step", "train_wall_s", "val_acc"} - set(rows[0] if rows else {})
    if missing:
        raise ValueError(f"{path}: not a study steps.csv, missing columns {sorted(missing)}")
    return rows


def _value(row: Row, key: str) -> float | None:
    if key == "generated_per_useful":
        gen, useful = _value(row, "generated_samples"), _value(row, "useful_samples")
        return None if gen is None or not useful else gen / useful
    text = row.get(key, "")
    return float(text) if text not in ("", None) else None


def curves(rows: list[Row], x_key: str, y_key: str, x_scale: float = 1.0) -> Curves:
    """Per method, seed and step, the (x, y) point where ``y_key`` was logged (and is finite)."""
    out: Curves = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        x, y = _value(row, x_key), _value(row, y_key)
        if x is not None and y is not None and math.isfinite(y):
            out[row["method"]][row["seed"]][int(row["step"])] = (x * x_scale, y)
    return {m: dict(seeds) for m, seeds in out.items()}


def mean_and_band(
    by_seed: dict[str, dict[int, tuple[float, float]]],
) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, mean, min and max of y over seeds, at each step that every seed logged.

    Steps where a seed has no value (e.g. generated per useful sample when no sample was
    useful) are left out rather than averaged over fewer seeds; x is the seeds' mean x there.
    """
    steps = sorted(set.intersection(*(set(points) for points in by_seed.values())))
    xs, mean, low, high = [], [], [], []
    for step in steps:
        points = [seed_points[step] for seed_points in by_seed.values()]
        ys = [y for _, y in points]
        xs.append(sum(x for x, _ in points) / len(points))
        mean.append(sum(ys) / len(ys))
        low.append(min(ys))
        high.append(max(ys))
    return xs, mean, low, high


def _draw(ax, data: Curves, colors: dict[str, str], y_scale: float = 1.0) -> None:
    for method, by_seed in data.items():
        xs, mean, low, high = mean_and_band(by_seed)
        color = colors[method]
        ax.plot(xs, [y * y_scale for y in mean], marker="o", markersize=3, color=color, label=method)
        if len(by_seed) > 1:
            ax.fill_between(
                xs, [y * y_scale for y in low], [y * y_scale for y in high], color=color, alpha=0.15
            )


def plot_study(steps_csv: str | Path, out_dir: str | Path, setup_matplotlib: Callable) -> list[Path]:
    """Write ``study_accuracy.png`` (val accuracy vs step and vs training wall time) and
    ``study_signal.png`` (signal budget vs step) into ``out_dir``."""
    rows = read_steps(steps_csv)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plt = setup_matplotlib()
    methods = list(dict.fromkeys(row["method"] for row in rows))
    colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    written = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    _draw(axes[0], curves(rows, "step", "val_acc"), colors, 100)
    axes[0].set_xlabel("training step")
    _draw(axes[1], curves(rows, "train_wall_s", "val_acc", 1 / 60), colors, 100)
    axes[1].set_xlabel("training wall time (min, validation excluded)")
    for ax in axes:
        ax.set_ylabel("validation accuracy, mean@4 (%)")
        ax.legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct on CPU: mean over seeds, band = min..max")
    fig.tight_layout()
    written.append(out_dir / "study_accuracy.png")
    fig.savefig(written[-1])
    plt.close(fig)

    written.append(_signal_figure(plt, rows, colors, _draw, out_dir / "study_signal.png"))
    return written


# --------------------------------------------------------------------------- controlled testbed


def ci_band(
    by_seed: dict[str, dict[int, tuple[float, float]]],
) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps every seed logged, and the mean over seeds with its 95% bootstrap CI (recipe.stats)."""
    from recipe.stats import bootstrap_ci

    steps = sorted(set.intersection(*(set(points) for points in by_seed.values())))
    mean, low, high = [], [], []
    for step in steps:
        ci = bootstrap_ci([points[step][1] for points in by_seed.values()])
        mean.append(ci.mean)
        low.append(ci.low)
        high.append(ci.high)
    return steps, mean, low, high


def paired_curves(data: Curves, baseline: str) -> Curves:
    """Per method (baseline excluded) and seed, ``y - y_baseline`` at the steps both logged (same seed)."""
    base = data.get(baseline, {})
    out: Curves = {}
    for method, by_seed in data.items():
        if method == baseline:
            continue
        diffs = {}
        for seed, points in by_seed.items():
            if seed in base:
                common = set(points) & set(base[seed])
                diffs[seed] = {s: (points[s][0], points[s][1] - base[seed][s][1]) for s in common}
        if diffs:
            out[method] = diffs
    return out


def _draw_ci(ax, data: Curves, colors: dict[str, str], y_scale: float = 1.0) -> None:
    for method, by_seed in data.items():
        steps, mean, low, high = ci_band(by_seed)
        color = colors[method]
        ax.plot(steps, [y * y_scale for y in mean], marker="o", markersize=3, color=color, label=method)
        ax.fill_between(
            steps, [y * y_scale for y in low], [y * y_scale for y in high], color=color, alpha=0.15
        )


def plot_testbed(
    steps_csv: str | Path, out_dir: str | Path, setup_matplotlib: Callable, baseline: str = "grpo"
) -> list[Path]:
    """``testbed_accuracy.png`` (validation accuracy, and its paired difference to ``baseline``, vs
    step) and ``testbed_signal.png`` (signal budget vs step); bands are 95% bootstrap CIs over seeds."""
    rows = read_steps(steps_csv)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plt = setup_matplotlib()
    methods = list(dict.fromkeys(row["method"] for row in rows))
    colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    seeds = len({row["seed"] for row in rows})
    written = []

    accuracy = curves(rows, "step", "val_acc")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    _draw_ci(axes[0], accuracy, colors, 100)
    axes[0].set_ylabel("validation accuracy, greedy (%)")
    _draw_ci(axes[1], paired_curves(accuracy, baseline), colors, 100)
    axes[1].axhline(0.0, color="black", linewidth=0.8)
    axes[1].set_ylabel(f"accuracy minus {baseline}'s, same seed (points)")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.legend(fontsize=8)
    fig.suptitle(f"Controlled testbed on CPU: mean over {seeds} seeds, band = 95% bootstrap CI")
    fig.tight_layout()
    written.append(out_dir / "testbed_accuracy.png")
    fig.savefig(written[-1])
    plt.close(fig)

    written.append(_signal_figure(plt, rows, colors, _draw_ci, out_dir / "testbed_signal.png"))
    return written


def _signal_figure(
    plt: Any, rows: list[dict], colors: dict[str, str], draw: Callable[..., None], path: Path
) -> Path:
    """One panel per ``SIGNAL_PANELS`` metric over the training steps (step > 0), drawn by ``draw``
    (``_draw``: mean and seed range; ``_draw_ci``: mean and bootstrap band); saved to ``path``
    with the caller's ``matplotlib.pyplot``."""
    fig, axes = plt.subplots(1, len(SIGNAL_PANELS), figsize=(4.4 * len(SIGNAL_PANELS), 3.8))
    training = [r for r in rows if int(r["step"]) > 0]
    for ax, (key, title) in zip(axes, SIGNAL_PANELS, strict=True):
        draw(ax, curves(training, "step", key), colors)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
