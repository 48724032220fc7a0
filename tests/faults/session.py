"""The pytest session that wrote the fault records: when, how long, on what machine, at which commit.

tests/conftest.py calls :func:`started` and :func:`finished`; :func:`on_record` runs at each record. A
session that wrote at least one record leaves ``_session.json`` beside them, which the table prints under
the rows (date, duration, pass/fail counts, load, fp32 matmul roofline): no figure of the table's
footnote is typed by hand. The roofline is measured at the fault runs' model shapes with this process's
torch threads, at the first record and at the end (building the model costs a few seconds, so sessions
that write no record never pay it).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from recipe.files import atomic_write_text
from tests.paths import REPO

SESSION_FILE = "_session.json"  # never a record's name: keys start with a letter or digit


@dataclass(frozen=True)
class FaultSession:
    """What one pytest session that wrote fault records was.

    Attributes:
        command: the pytest arguments (``bash scripts/test.sh -m faults`` gives ``-m faults``).
        started_at: the start, seconds since the epoch (records written before it are another session's).
        started_utc: when the session started, ``YYYY-MM-DD HH:MM`` UTC.
        duration_s: the whole session, collection included.
        passed / failed / skipped / errors: test outcomes.
        records: records this session wrote into this folder.
        commit: the checkout's HEAD.
        clean_checkout: ``git status --porcelain`` was empty at the start (nothing edited or added).
        cores: CPUs of the machine.
        load_start / load_end: 1-minute load average at the start and the end.
        roofline_first / roofline_end: fp32 matmul GFLOP/s at the fault runs' model shapes, at the first
            record and at the end (None: not measured).
        threads: torch intra-op threads of the roofline.
    """

    command: str
    started_at: float
    started_utc: str
    duration_s: float
    passed: int
    failed: int
    skipped: int
    errors: int
    records: int
    commit: str
    clean_checkout: bool
    cores: int
    load_start: float
    load_end: float
    roofline_first: float | None
    roofline_end: float | None
    threads: int


_state: dict = {}


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _roofline() -> tuple[float, int]:
    """(GFLOP/s, threads) at the fault runs' model shapes; the model is built once per session."""
    import torch

    from recipe.cpu_backend.roofline import roofline_gflops
    from recipe.models.tiny import build_tiny_qwen2
    from tests.faults.harness import MODEL_SHAPE

    if "model" not in _state:
        _state["tmp"] = tempfile.TemporaryDirectory(prefix="fault_roofline_")
        _state["model"] = build_tiny_qwen2(Path(_state["tmp"].name) / "model", **MODEL_SHAPE)
    return round(roofline_gflops(_state["model"], tokens=512, repeats=3), 1), torch.get_num_threads()


def started(args: list[str]) -> None:
    _state.clear()
    _state.update(
        t0=time.time(),
        command=" ".join(args),
        load_start=round(os.getloadavg()[0], 2),
        commit=_git("rev-parse", "HEAD"),
        clean=_git("status", "--porcelain") == "",
        folders={},
    )


def on_record(folder: Path) -> None:
    """Called by records.record() with the folder it wrote into: counts, and measures the roofline at the
    first record."""
    if "t0" not in _state:  # a record outside a pytest session
        return
    key = str(folder.resolve())
    _state["folders"][key] = _state["folders"].get(key, 0) + 1
    if "roofline_first" not in _state:
        _state["roofline_first"], _state["threads"] = _roofline()


def finished(outcomes: dict[str, int]) -> list[Path]:
    """Write ``_session.json`` into every folder this session wrote records into; return their paths."""
    folders = _state.get("folders") or {}
    if not folders:
        return []
    roofline_end, threads = _roofline()
    written = []
    for folder, count in folders.items():
        written.append(_write(Path(folder), count, outcomes, roofline_end, threads))
    _state["tmp"].cleanup()
    return written


def _write(folder: Path, count: int, outcomes: dict[str, int], roofline_end: float, threads: int) -> Path:
    session = FaultSession(
        command=_state["command"],
        started_at=_state["t0"],
        started_utc=datetime.fromtimestamp(_state["t0"], timezone.utc).strftime("%Y-%m-%d %H:%M"),
        duration_s=round(time.time() - _state["t0"], 1),
        passed=outcomes.get("passed", 0),
        failed=outcomes.get("failed", 0),
        skipped=outcomes.get("skipped", 0),
        errors=outcomes.get("error", 0),
        records=count,
        commit=_state["commit"],
        clean_checkout=_state["clean"],
        cores=os.cpu_count() or 0,
        load_start=_state["load_start"],
        load_end=round(os.getloadavg()[0], 2),
        roofline_first=_state.get("roofline_first"),
        roofline_end=roofline_end,
        threads=threads,
    )
    path = folder / SESSION_FILE
    atomic_write_text(path, json.dumps(asdict(session), indent=1) + "\n")
    return path


def load_session(folder: Path) -> FaultSession | None:
    path = folder / SESSION_FILE
    return FaultSession(**json.loads(path.read_text())) if path.is_file() else None
