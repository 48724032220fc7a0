"""Read training metrics (JSONL or tensorboard) and eval summaries into per-step series.

Training metrics sources:
    * JSONL, one object per line: ``{"step": N, "timestamp": t, "<metric>": value, ...}`` (the
      recipe's writer) or verl's FileLogger form ``{"step": N, "data": {"<metric>": value}}``;
    * tensorboard event files (verl's ``tensorboard`` logger), read with EventAccumulator.
A folder is searched recursively for ``*.jsonl`` files, else for ``events.out.tfevents.*``.

A series is ``{step: value}``; the last value logged for a step wins.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from pathlib import Path

from recipe.tracking import names
from recipe.tracking.jsonl import read_metrics_jsonl

Series = dict[int, float]
Metrics = dict[str, Series]

# COPO diagnostics logged by the trainer, with axis labels.
COPO_DIAGNOSTICS: tuple[tuple[str, str], ...] = (
    (names.SIGNAL_FRAC_ALL_CORRECT, "groups all correct (fraction)"),
    (names.SIGNAL_FRAC_ALL_WRONG, "groups all wrong (fraction)"),
    (names.COPO_ENTROPY_MEAN, "consistency entropy (bits)"),
    (names.COPO_LOCAL_WEIGHT_MEAN, "mean local weight"),
    (names.COPO_FRAC_NONZERO_ADV, "responses with non-zero advantage (fraction)"),
    (names.SCORE_MEAN, "training reward (mean)"),
)

# verl: val-core/<data_source>/<var>/<metric>, where data_source may itself contain "/" and
# metric is mean@N, or maj@N/mean and best@N/mean for bootstrapped ones.
_VAL_RE = re.compile(
    r"^val-(?:core|aux)/(?P<ds>.+)/(?P<var>[^/]+)/(?P<metric>(?:mean|maj|best)@\d+)(?:/mean)?$"
)
_ACC_VARS = ("acc", "reward", "score")


def _add(metrics: Metrics, step: int, key: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    value = float(value)
    if math.isfinite(value):
        metrics.setdefault(key, {})[int(step)] = value


def read_jsonl_metrics(path: str | Path) -> Metrics:
    """Metrics from a JSONL file (flat or verl FileLogger form), through ``read_metrics_jsonl``."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such metrics file")
    metrics: Metrics = {}
    for row in read_metrics_jsonl(path):
        for key, value in row.items():
            if key not in ("step", "timestamp"):
                _add(metrics, row["step"], key, value)
    return metrics


def read_tensorboard_metrics(path: str | Path) -> Metrics:
    """Scalars from every tensorboard event file under ``path`` (a file or a folder)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    path = Path(path)
    files = [path] if path.is_file() else sorted(path.rglob("events.out.tfevents.*"))
    metrics: Metrics = {}
    for event_file in files:
        acc = EventAccumulator(str(event_file), size_guidance={SCALARS: 0})  # 0: keep every point
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for event in acc.Scalars(tag):
                _add(metrics, event.step, tag, event.value)
    return metrics


def read_training_metrics(path: str | Path) -> Metrics:
    """Metrics from a JSONL file, an event file, or a folder holding either.

    Raises:
        FileNotFoundError: nothing readable at ``path``.
    """
    path = Path(path)
    if path.is_file():
        if path.name.startswith("events.out.tfevents"):
            return read_tensorboard_metrics(path)
        return read_jsonl_metrics(path)
    if path.is_dir():
        jsonl = sorted(path.rglob("*.jsonl"))
        if jsonl:
            metrics: Metrics = {}
            for file in jsonl:
                for key, series in read_jsonl_metrics(file).items():
                    metrics.setdefault(key, {}).update(series)
            return metrics
        if any(path.rglob("events.out.tfevents.*")):
            return read_tensorboard_metrics(path)
    raise FileNotFoundError(f"{path}: no metrics JSONL file or tensorboard event files found")


def validation_accuracy(metrics: Metrics) -> dict[str, dict[str, Series]]:
    """Per data_source validation curves from verl's val keys: ``{ds: {"mean@N": series, ...}}``.

    Uses the ``acc`` variable when logged for a data_source, else ``reward``/``score``.
    """
    by_ds: dict[str, dict[str, dict[str, Series]]] = {}
    for key, series in metrics.items():
        match = _VAL_RE.match(key)
        if match and match["var"] in _ACC_VARS:
            by_ds.setdefault(match["ds"], {}).setdefault(match["var"], {})[match["metric"]] = series
    result = {}
    for ds, by_var in by_ds.items():
        var = next(v for v in _ACC_VARS if v in by_var)
        result[ds] = by_var[var]
    return result


def read_eval_summary(path: str | Path) -> dict[str, dict[str, Series]]:
    """Curves from scripts/evaluate.py's summary.csv: ``{dataset: {"mean@k": series, "maj@k": ...}}``.

    Rows without a training step (plain HF models) are not curves and are left out.

    Raises:
        FileNotFoundError: ``path`` (a summary.csv or a folder holding one) does not exist.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "summary.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no eval summary.csv (written by scripts/evaluate.py --out DIR)")
    result: dict[str, dict[str, Series]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if not row.get("step"):
                continue
            k = row["k"]
            for name in ("mean", "maj", "pass"):
                result.setdefault(row["dataset"], {}).setdefault(f"{name}@{k}", {})[int(row["step"])] = float(
                    row[f"{name}@k"]
                )
    return result


def sorted_series(series: Mapping[int, float]) -> tuple[list[int], list[float]]:
    """(steps, values) in step order, ready for ``plt.plot``."""
    steps = sorted(series)
    return steps, [series[s] for s in steps]
