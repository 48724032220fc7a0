"""Plot training runs: accuracy vs step per dataset (several runs per axis) and COPO diagnostics.

Example::

    python scripts/plot_run.py \\
        --run COPO=tensorboard_log/copo/qwen7b --run GRPO=runs/grpo/metrics.jsonl \\
        --eval COPO=eval/qwen7b_copo --eval GRPO=eval/qwen7b_grpo --out figures/

``--run NAME=PATH``: training metrics, a JSONL file, an event file or a folder holding either;
its ``val-core/<data_source>/acc/mean@N`` curves (verl's validation during training) and its
``copo/*`` diagnostics are drawn. ``--study STEPS_CSV``: the CPU study's figures
(``study_accuracy.png``, ``study_signal.png``, drawn by ``recipe.study.plots``; see scripts/study_cpu.py). ``--eval NAME=PATH``: a summary.csv of scripts/evaluate.py
(or its --out folder); its mean@k / maj@k per step are drawn. ``--curve RUN``: one run's learning curve
(``quickstart_curve.png``, ``recipe.tracking.curve``). A run keeps one colour in all
figures. Writes ``accuracy.png`` (one panel per dataset), ``accuracy_<dataset>.png`` and
``copo_diagnostics.png``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from recipe.tracking import names
from recipe.tracking.curve import plot_curve
from recipe.tracking.training import (
    COPO_DIAGNOSTICS,
    Series,
    read_eval_summary,
    read_training_metrics,
    sorted_series,
    validation_accuracy,
)

# line style per source: eval mean@k solid, eval maj@k dashed, pass@k dash-dot, training validation dotted
_STYLES = {"mean": ("-", "o"), "maj": ("--", "s"), "pass": ("-.", "^")}
_VAL_STYLE = (":", "x")


T = TypeVar("T")


def _named(items: list[str], flag: str) -> list[tuple[str, Path]]:
    """``["COPO=path", "path2"]`` -> ``[("COPO", path), ("path2's name", path2)]``."""
    named = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = Path(item).stem or Path(item).name, item
        if not Path(path).exists():
            raise SystemExit(f"plot_run.py: error: {flag} {item}: {path} does not exist")
        named.append((name, Path(path)))
    return named


def _file_name(dataset: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", dataset).strip("._")


def setup_matplotlib():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on clusters
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {"figure.dpi": 120, "savefig.dpi": 150, "axes.grid": True, "grid.alpha": 0.3, "font.size": 10}
    )
    return plt


def _draw_accuracy(
    ax, dataset: str, curves: list[tuple[str, str, str, Series]], colors: dict[str, str]
) -> None:
    """curves: (run, kind 'mean'|'maj'|'pass'|'val', metric label, series) of one dataset."""
    from matplotlib.ticker import MaxNLocator

    for run, kind, label, series in curves:
        steps, values = sorted_series(series)
        linestyle, marker = _VAL_STYLE if kind == "val" else _STYLES[kind]
        ax.plot(
            steps,
            [100 * v for v in values],
            linestyle=linestyle,
            marker=marker,
            markersize=4,
            color=colors[run],
            label=f"{run} {label}",
        )
    ax.set_title(dataset)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy (%)")
    ax.legend(fontsize=8)


def plot_accuracy(
    runs: dict[str, dict[str, dict[str, Series]]],
    evals: dict[str, dict[str, dict[str, Series]]],
    out_dir: Path,
    colors: dict[str, str],
    kinds: tuple[str, ...] = ("mean", "maj"),
) -> list[Path]:
    """Accuracy vs step, one panel per dataset with every run on it.

    Args:
        runs: run -> dataset -> {"mean@N": series} from training validation metrics.
        evals: run -> dataset -> {"mean@k": series, "maj@k": ..., "pass@k": ...} from eval summaries.
    """
    plt = setup_matplotlib()
    per_ds: dict[str, list[tuple[str, str, str, Series]]] = {}
    for run, by_ds in evals.items():
        for ds, by_metric in by_ds.items():
            for metric, series in by_metric.items():
                kind = metric.split("@")[0]
                if kind in kinds:
                    per_ds.setdefault(ds, []).append((run, kind, metric, series))
    for run, by_ds in runs.items():
        for ds, by_metric in by_ds.items():
            for metric, series in by_metric.items():
                if metric.split("@")[0] in kinds:
                    per_ds.setdefault(ds, []).append((run, "val", f"val {metric}", series))
    if not per_ds:
        return []
    written = []
    datasets = sorted(per_ds)
    cols = min(3, len(datasets))
    rows = -(-len(datasets) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, ds in zip(axes.flat, datasets, strict=False):
        _draw_accuracy(ax, ds, per_ds[ds], colors)
    for ax in list(axes.flat)[len(datasets) :]:
        ax.set_visible(False)
    fig.tight_layout()
    written.append(out_dir / "accuracy.png")
    fig.savefig(written[-1])
    plt.close(fig)
    for ds in datasets:
        fig, ax = plt.subplots(figsize=(6, 4.2))
        _draw_accuracy(ax, ds, per_ds[ds], colors)
        fig.tight_layout()
        written.append(out_dir / f"accuracy_{_file_name(ds)}.png")
        fig.savefig(written[-1])
        plt.close(fig)
    return written


def plot_diagnostics(
    metrics: dict[str, dict[str, Series]], out_dir: Path, colors: dict[str, str]
) -> Path | None:
    """COPO diagnostics vs step, one panel per diagnostic, one line per run."""
    present = [(key, label) for key, label in COPO_DIAGNOSTICS if any(key in m for m in metrics.values())]
    # The reward and signal/ panels alone (any estimator logs them) make no COPO figure.
    if not any(key.startswith(names.COPO_PREFIX) for key, _ in present):
        return None
    plt = setup_matplotlib()
    from matplotlib.ticker import MaxNLocator

    cols = 3
    rows = -(-len(present) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, present, strict=False):
        for run, run_metrics in metrics.items():
            if key in run_metrics:
                steps, values = sorted_series(run_metrics[key])
                ax.plot(steps, values, color=colors[run], label=run, linewidth=1.5)
        ax.set_title(key)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(present) :]:
        ax.set_visible(False)
    fig.tight_layout()
    path = out_dir / "copo_diagnostics.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="plot_run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", default=[], metavar="NAME=PATH", help="training metrics")
    parser.add_argument(
        "--eval", action="append", default=[], metavar="NAME=PATH", help="evaluate.py summary"
    )
    parser.add_argument(
        "--study", metavar="STEPS_CSV", help="steps.csv of scripts/study_cpu.py: draw the study figures"
    )
    parser.add_argument(
        "--curve",
        metavar="RUN",
        help="a run folder or its metrics.jsonl: draw its learning curve (quickstart_curve.png: reward per step, "
        "validation before/after)",
    )
    parser.add_argument("--out", default="figures", help="output folder for the PNGs (default %(default)s)")
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=["mean", "maj"],
        choices=sorted(_STYLES),
        help="accuracy metrics to draw (default: %(default)s)",
    )
    return parser


def _read_all(
    named: list[tuple[str, Path]], flag: str, read: Callable[[Path], T], describe: Callable[[T], str]
) -> dict[str, T]:
    """``read`` each NAME=PATH of ``flag``; a missing path exits naming the flag and the run."""
    out: dict[str, T] = {}
    for name, path in named:
        try:
            out[name] = read(path)
        except FileNotFoundError as err:
            raise SystemExit(f"plot_run.py: error: {flag} {name}: {err}") from err
        print(f"[plot] {name}: {describe(out[name])} from {path}")
    return out


# plot_study(steps_csv, out_dir, setup_matplotlib) -> written files (recipe.study.plots.plot_study)
StudyPlotter = Callable[[str, str, Callable], list[Path]]


def main(argv: list[str] | None = None, *, study_plotter: StudyPlotter | None = None) -> list[Path]:
    """The ``plot_run.py`` command line. ``--study`` draws with ``study_plotter``, which the caller
    hands in (scripts/plot_run.py: ``recipe.study.plots.plot_study``): tracking imports no study code."""
    args = build_parser().parse_args(argv)
    if args.study:
        if study_plotter is None:
            raise SystemExit("plot_run.py: error: --study: no study plotter given (run scripts/plot_run.py)")
        try:
            written = study_plotter(args.study, args.out, setup_matplotlib)
        except (FileNotFoundError, ValueError) as err:
            raise SystemExit(f"plot_run.py: error: --study: {err}") from err
        for path in written:
            print(f"[plot] wrote {path}")
        return written
    if args.curve:
        try:
            path = plot_curve(args.curve, args.out, setup_matplotlib)
        except (FileNotFoundError, ValueError) as err:
            raise SystemExit(f"plot_run.py: error: --curve: {err}") from err
        print(f"[plot] wrote {path}")
        return [path]
    if not args.run and not args.eval:
        raise SystemExit(
            "plot_run.py: error: give at least one --run NAME=PATH, --eval NAME=PATH, --curve RUN or --study STEPS_CSV"
        )
    runs = _named(args.run, "--run")
    evals = _named(args.eval, "--eval")
    names = list(dict.fromkeys([n for n, _ in runs] + [n for n, _ in evals]))
    palette = [f"C{i}" for i in range(10)]
    colors = {name: palette[i % len(palette)] for i, name in enumerate(names)}

    train_metrics = _read_all(runs, "--run", read_training_metrics, lambda m: f"{len(m)} metrics")
    eval_curves = _read_all(evals, "--eval", read_eval_summary, lambda c: f"eval curves for {sorted(c)}")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    val_curves = {name: validation_accuracy(m) for name, m in train_metrics.items()}
    written = plot_accuracy(val_curves, eval_curves, out_dir, colors, tuple(args.metrics))
    if not written:
        print("[plot] no accuracy curves: no val-core/* metrics in --run and no stepped rows in --eval")
    diagnostics = plot_diagnostics(train_metrics, out_dir, colors)
    if diagnostics is None:
        if train_metrics:
            print("[plot] no copo/* diagnostics in the --run metrics: copo_diagnostics.png not drawn")
    else:
        written.append(diagnostics)
    if not written:
        raise SystemExit("plot_run.py: error: nothing to plot")
    for path in written:
        print(f"[plot] wrote {path}")
    return written


if __name__ == "__main__":
    main()
