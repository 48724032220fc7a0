"""recipe.proc: a stopped launcher stops every process it started, grandchildren included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from recipe.proc import start_group, stop_group
from tests.paths import REPO

# A launcher that starts a child which starts a grandchild (both ignore nothing and sleep), writes
# their pids, then waits: the shape of quickstart -> main_copo -> Ray workers.
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys, time
    from recipe.proc import Stopped, start_group, stop_signals_forwarded

    pids_file = sys.argv[1]
    tree = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print(p.pid, flush=True); time.sleep(600)"
    procs = []
    try:
        with stop_signals_forwarded(procs, grace_s=5):
            child = start_group([sys.executable, "-c", tree], stdout=subprocess.PIPE, text=True)
            procs.append(child)
            grandchild = int(child.stdout.readline())
            with open(pids_file, "w") as f:
                f.write(f"{child.pid} {grandchild}")
            child.wait()
    except Stopped as exc:
        sys.exit(exc.exit_code)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_stopped_launcher_leaves_nothing(tmp_path: Path, signum: int) -> None:
    pids_file = tmp_path / "pids"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(pids_file)], cwd=REPO, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not (pids_file.exists() and pids_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child, grandchild = map(int, pids_file.read_text().split())
    assert _alive(child) and _alive(grandchild)
    launcher.send_signal(signum)
    assert launcher.wait(timeout=30) == 128 + signum
    deadline = time.monotonic() + 10
    while (_alive(child) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child) and not _alive(grandchild)


def test_stop_group_kills_what_ignores_sigterm() -> None:
    stubborn = start_group(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    )
    time.sleep(0.5)
    started = time.monotonic()
    stop_group(stubborn, grace_s=1.0)
    assert stubborn.poll() == -signal.SIGKILL
    assert time.monotonic() - started < 15
