"""What each fault test measured, one JSON file per fault, for the table of docs/RELIABILITY.md.

A fault test calls :func:`record` once its checks passed; ``python -m tests.faults.table`` renders every
record of a folder into the table. The folder is ``$COPO_FAULT_RECORDS``, else ``runs/faults/`` in the
checkout (git ignores ``runs/``). Numbers come from the run (wall clocks, /proc, metrics.jsonl), never
from prose.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from recipe.files import atomic_write_text
from tests.faults import session
from tests.paths import REPO

RECORDS_ENV = "COPO_FAULT_RECORDS"


@dataclass(frozen=True)
class FaultRecord:
    """One row of the reliability table.

    Attributes:
        key: stable id, also the file name (``<key>.json``); rows are ordered by it.
        fault: what went wrong, in a user's words.
        injection: how the test made it happen, on real processes.
        stop_s: seconds from the injection until the launcher had exited and no process of the run was
            left (None: the run is not meant to stop, e.g. a resume after the fault).
        steps_lost: trained steps (logged in metrics.jsonl before the fault) that the resume point does not
            hold and that must be trained again (None: no training involved).
        processes_left: processes of the run alive after the stop (target 0).
        resumed_same_next_step: a relaunch resumed and trained the step after the last logged one, on the
            same prompts as an uninterrupted run (None: no resume involved).
        note: one line on what the test also checked.
        load_1min: the machine's 1-minute load average when the fault was injected.
        cores: CPUs of the machine.
    """

    key: str
    fault: str
    injection: str
    stop_s: float | None
    steps_lost: int | None
    processes_left: int
    resumed_same_next_step: bool | None
    note: str = ""
    load_1min: float = 0.0
    cores: int = 0


def records_dir() -> Path:
    return Path(os.environ.get(RECORDS_ENV) or REPO / "runs" / "faults")


def record(
    key: str,
    fault: str,
    injection: str,
    *,
    stop_s: float | None,
    steps_lost: int | None,
    processes_left: int,
    resumed_same_next_step: bool | None,
    note: str = "",
    load_1min: float | None = None,
) -> FaultRecord:
    """Write the record of one fault test (``load_1min`` defaults to the load now)."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", key):
        raise ValueError(f"record key {key!r}: lower-case letters, digits, '.', '_' and '-' only")
    entry = FaultRecord(
        key=key,
        fault=fault,
        injection=injection,
        stop_s=None if stop_s is None else round(float(stop_s), 1),
        steps_lost=steps_lost,
        processes_left=processes_left,
        resumed_same_next_step=resumed_same_next_step,
        note=note,
        load_1min=round(os.getloadavg()[0] if load_1min is None else load_1min, 2),
        cores=os.cpu_count() or 0,
    )
    folder = records_dir()
    atomic_write_text(
        folder / f"{key}.json", json.dumps({**asdict(entry), "written_at": time.time()}, indent=1) + "\n"
    )
    session.on_record(folder)
    return entry


def load_records(folder: Path, since: float | None = None) -> list[FaultRecord]:
    """Every record in ``folder`` (written at or after ``since``, when given), ordered by key."""
    fields = set(FaultRecord.__dataclass_fields__)
    rows = []
    for path in sorted(folder.glob("[a-z0-9]*.json")):
        data = json.loads(path.read_text())
        if since is None or data.get("written_at", 0.0) >= since:
            rows.append(FaultRecord(**{k: v for k, v in data.items() if k in fields}))
    return sorted(rows, key=lambda r: r.key)
