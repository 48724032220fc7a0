"""One JSON line per logged step with every scalar metric, next to verl's tracking backends.

Key: ``trainer.metrics_jsonl`` (default ``${trainer.default_local_dir}/metrics.jsonl``; empty or
null disables). Each line is ``{"step": int, "timestamp": float, "<verl metric name>": float, ...}``
(e.g. ``critic/score/mean``, ``copo/entropy_mean``, ``val-core/...``). The file is append-only
and flushed (and fsynced) after every line, so a crash loses nothing already written.

Resume: when training restarts from checkpoint step S, lines with ``step > S`` belong to steps
that will be trained again; they are dropped (the original file is kept as
``<path>.bak-<unix time>``) so every step appears once. A fresh run (S = 0) over an existing
file backs it up the same way and starts empty. A second line for a step already in the
file (e.g. the re-run initial validation at step S) is not written.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from recipe.files import atomic_file
from recipe.tracking.names import VAL_PREFIX


def metrics_jsonl_path(config: Any) -> str | None:
    """``trainer.metrics_jsonl`` from a trainer config, or None when disabled."""
    trainer = config.get("trainer") if hasattr(config, "get") else None
    path = trainer.get("metrics_jsonl", None) if trainer is not None else None
    if path is None or str(path).strip() in ("", "null", "None"):
        return None
    return str(path)


def _scalar(value: Any) -> float | int | None:
    """A JSON-safe number for scalar metrics; None for anything else (lists, tables, strings)."""
    if hasattr(value, "numel") and hasattr(value, "item"):  # torch tensor
        if value.numel() != 1:
            return None
        value = value.item()
    elif isinstance(value, np.ndarray):
        if value.size != 1:
            return None
        value = value.reshape(()).item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else None
    return None


def scalar_metrics(data: Mapping[str, Any]) -> dict[str, float | int | None]:
    """Every scalar entry of ``data``; non-finite floats become null (strict JSON)."""
    out: dict[str, float | int | None] = {}
    for key, value in data.items():
        number = _scalar(value)
        is_nonfinite_float = isinstance(value, float | np.floating) and not math.isfinite(float(value))
        if number is not None or is_nonfinite_float:
            out[str(key)] = number
    return out


def _records(path: str | os.PathLike) -> list[tuple[dict[str, Any] | None, str]]:
    """(record, raw line) of every complete line; a line cut by a crash (or being written) is skipped."""
    rows: list[tuple[dict[str, Any] | None, str]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                continue  # torn write from a crash, or the line a live run is writing now
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            rows.append((record if isinstance(record, dict) else None, line))
    return rows


def _read_lines(path: str) -> list[tuple[int | None, str]]:
    """(step, raw line) of every well-formed line."""
    rows: list[tuple[int | None, str]] = []
    for record, line in _records(path):
        if record is None:
            continue
        step = record.get("step")
        rows.append((step if isinstance(step, int) else None, line))
    return rows


def read_metrics_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a metrics JSONL file in file order, each ``{"step": int, "<metric>": value, ...}``.

    The one reader of ``metrics.jsonl``: safe on a file a live run is appending to (an unfinished
    last line is left out) and on a missing file (no rows). verl's FileLogger form
    ``{"step": N, "data": {...}}`` is flattened to the same shape.
    """
    if not os.path.isfile(path):
        return []
    rows = []
    for record, _ in _records(path):
        if record is None or not isinstance(record.get("step"), int):
            continue
        payload = record["data"] if isinstance(record.get("data"), dict) else record
        rows.append({**payload, "step": record["step"]})
    return rows


def val_accuracy(row: Mapping[str, Any]) -> float | None:
    """Validation accuracy of one metrics row: the mean over data sources of verl's
    ``val-core/<source>/acc/mean@N``, else of ``.../reward/mean@N``; None when the row has neither."""
    for var in ("acc", "reward"):
        vals = [
            float(v)
            for k, v in row.items()
            if k.startswith(VAL_PREFIX) and f"/{var}/mean@" in k and isinstance(v, int | float)
        ]
        if vals:
            return sum(vals) / len(vals)
    return None


class JsonlMetricsWriter:
    """Append-only JSONL writer; see the module docstring for the resume rule."""

    def __init__(self, path: str, resume_step: int = 0) -> None:
        self.path = path
        self.written_steps: set[int] = set()
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        if os.path.exists(path):
            self._truncate_after(resume_step)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run

    def _truncate_after(self, resume_step: int) -> None:
        rows = _read_lines(self.path)
        # A fresh run (resume_step 0) starts a new file; a resumed one keeps steps <= resume_step.
        keep = [
            (step, line) for step, line in rows if resume_step > 0 and (step is None or step <= resume_step)
        ]
        with open(self.path, encoding="utf-8") as f:
            original = f.read()
        if len(keep) != len(rows) or "".join(line for _, line in rows) != original:
            shutil.copyfile(self.path, f"{self.path}.bak-{int(time.time())}")
            with atomic_file(self.path) as f:  # a crash leaves the old file or the new
                f.writelines(line for _, line in keep)
        self.written_steps = {step for step, _ in keep if step is not None}

    def write(self, data: Mapping[str, Any], step: int) -> bool:
        """Append one line for ``step``; returns False when that step already has a line."""
        step = int(step)
        if step in self.written_steps:
            return False
        record: dict[str, Any] = {"step": step, "timestamp": time.time()}
        record.update(scalar_metrics(data))
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.written_steps.add(step)
        return True

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class JsonlTeeTracking:
    """Wraps verl's ``Tracking``: ``log`` goes to its backends and to the JSONL file, then to
    ``after_log(step)`` (the trainer publishes the step's checkpoint there: recipe/copo/trainer.py)."""

    def __init__(
        self,
        tracking: Any,
        path: str,
        resume_step: int = 0,
        after_log: Callable[[int], None] | None = None,
    ) -> None:
        self._tracking = tracking
        self._writer = JsonlMetricsWriter(path, resume_step=resume_step)
        self._after_log = after_log

    def log(self, data: Mapping[str, Any], step: int, backend: Any = None) -> None:
        self._tracking.log(data=data, step=step, backend=backend)
        self._writer.write(data, step)
        if self._after_log is not None:
            self._after_log(int(step))

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._tracking.finish(*args, **kwargs)
        finally:
            self._writer.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tracking, name)
