"""The fault records, their session and the table tests/faults/table.py renders from them."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from tests.faults import session, table
from tests.faults.records import FaultRecord, load_records, record
from tests.paths import REPO


def test_records_round_trip_and_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "_state", {})  # outside a session: this pytest run's session is not told
    monkeypatch.setenv("COPO_FAULT_RECORDS", str(tmp_path))
    (tmp_path / "0-older.json").write_text(json.dumps({**_row("0-older"), "written_at": 1.0}))
    record(
        "b-second",
        "disk | full",
        "tmpfs",
        stop_s=1.26,
        steps_lost=0,
        processes_left=0,
        resumed_same_next_step=True,
        load_1min=2.0,
    )
    record(
        "a-first",
        "kill",
        "SIGKILL",
        stop_s=None,
        steps_lost=None,
        processes_left=1,
        resumed_same_next_step=False,
        load_1min=3.5,
    )
    assert [r.key for r in load_records(tmp_path)] == ["0-older", "a-first", "b-second"]
    rows = load_records(tmp_path, since=2.0)
    assert [r.key for r in rows] == ["a-first", "b-second"]
    assert rows[1] == FaultRecord("b-second", "disk | full", "tmpfs", 1.3, 0, 0, True, "", 2.0, rows[1].cores)
    text = table.render(rows)
    assert "| kill | SIGKILL | n/a | n/a | 1 | **no** |  |" in text
    assert "| disk \\| full | tmpfs | 1.3 | 0 | 0 | yes |  |" in text
    assert "1-minute load 2.0-3.5" in text
    doc = f"intro\n{table.BEGIN}\nold\n{table.END}\nafter\n"
    assert table.replace_table(doc, text) == f"intro\n{table.BEGIN}\n{text}{table.END}\nafter\n"
    with pytest.raises(ValueError, match="key"):
        record(
            "Bad Key", "x", "y", stop_s=None, steps_lost=None, processes_left=0, resumed_same_next_step=None
        )
    json.loads((tmp_path / "a-first.json").read_text())


def _row(key: str) -> dict:
    return {
        "key": key,
        "fault": "f",
        "injection": "i",
        "stop_s": None,
        "steps_lost": None,
        "processes_left": 0,
        "resumed_same_next_step": None,
    }


def test_the_session_is_written_beside_its_records_and_rendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session that wrote records leaves _session.json in that folder; the table prints it, and only
    the records written since its start."""
    monkeypatch.setattr(session, "_state", {})  # a session of its own, not this pytest run's
    session.started(["-m", "faults"])
    monkeypatch.setenv("COPO_FAULT_RECORDS", str(tmp_path))
    (tmp_path / "0-older.json").write_text(json.dumps({**_row("0-older"), "written_at": 1.0}))
    record("1-new", "f", "i", stop_s=2.0, steps_lost=0, processes_left=0, resumed_same_next_step=True)
    [path] = session.finished({"passed": 3, "failed": 0, "skipped": 1})
    assert path == tmp_path / session.SESSION_FILE
    run = session.load_session(tmp_path)
    assert run is not None and run.records == 1 and (run.passed, run.skipped) == (3, 1)
    assert run.roofline_first and run.roofline_end and run.threads >= 1 and run.duration_s >= 0
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    assert run.commit == head.stdout.strip()
    assert table.main(["--records", str(tmp_path)]) == 0
    text = table.render(load_records(tmp_path, since=run.started_at), [run])
    assert "| f | i | 2.0 | 0 | 0 | yes |  |" in text and "0-older" not in text
    assert (
        f"a pytest session (arguments `-m faults`) on {run.started_utc} UTC at commit {run.commit[:10]}"
        in text
    )
    assert "3 passed, 0 failed, 1 skipped in 0 min" in text


def test_the_committed_table_is_the_rendering_of_the_committed_records() -> None:
    """docs/RELIABILITY.md's table is exactly what table.render makes of docs/reliability/records.json."""
    records, sessions = table.committed()
    doc = table.DOC.read_text()
    between = doc.split(table.BEGIN, 1)[1].split(table.END, 1)[0]
    assert between == "\n" + table.render(records, sessions)
    assert sessions and sum(s.records for s in sessions) >= len(records)


def written_keys() -> set[str]:
    """Every record key a test writes: the literal first arguments of record(...) in tests/, and the
    key lists of the parametrised fault tests."""
    from tests.faults.test_signal_faults import RECORD_KEYS as SIGNAL_KEYS
    from tests.faults.test_worker_faults import RECORD_KEYS as WORKER_KEYS

    keys = set(SIGNAL_KEYS) | set(WORKER_KEYS)
    for path in (REPO / "tests").rglob("test_*.py"):
        if path.name == "test_table.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "record"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                keys.add(node.args[0].value)
    return keys


def test_every_fault_test_has_a_committed_record() -> None:
    """docs/reliability/records.json holds a record of every fault test: none missing, none stale."""
    records, _ = table.committed()
    keys = written_keys()
    assert len(keys) >= 30, sorted(keys)  # the key scan found the suite
    held = {r.key for r in records}
    assert held == keys, f"no record of {sorted(keys - held)}; records of no test: {sorted(held - keys)}"
