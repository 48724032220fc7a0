"""scripts/busy_machine.sh: the command competes with N busy neighbours, and they stop with it.

The share test spins one thread of Python for a fixed wall time and reads the CPU seconds it got,
alone and beside the neighbours in turns, everything pinned to one core: there the neighbours and the
spin (one session, so one scheduling group) split the core, and the spin gets a fraction of what it gets
alone, whatever else the machine is doing (no bound on the machine's own speed or load).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO

SCRIPT = str(REPO / "scripts" / "busy_machine.sh")
# Spins for argv[1] seconds of wall time and prints the CPU seconds the spin itself got (the interpreter's
# start-up, whose CPU time does not shrink under contention, is left out).
SPIN = (
    "import sys,time; w=float(sys.argv[1]); c=time.process_time(); t=time.time()\n"
    "while time.time()-t<w: pass\nprint(time.process_time()-c)"
)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not running
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _share(cmd: list[str], wall_s: float, cpu: int) -> float:
    """The share of core ``cpu`` a spin of ``wall_s`` seconds got, run through ``cmd`` pinned to that core
    (the neighbours ``cmd`` starts inherit the pinning)."""
    proc = subprocess.run(
        [*cmd, sys.executable, "-c", SPIN, str(wall_s)],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    return float(proc.stdout) / wall_s


def test_neighbours_take_the_commands_cpu_share() -> None:
    """A relation that holds however busy the machine already is: on one core, alone and beside 6 busy
    neighbours, measured in turns in this test, the spin gets less than alone (on a quiet core about a
    seventh; the machine's other load weighs on both measurements alike, so the gap narrows on a loaded
    core but stays wide: the 6 pinned neighbours always share the spin's core, unlike unpinned ones)."""
    cpu = min(os.sched_getaffinity(0))
    alone, busy = [], []
    for _ in range(3):  # interleaved, so a change in the machine's other load hits both alike
        alone.append(_share([], 1.0, cpu))
        busy.append(_share(["bash", SCRIPT, "6"], 1.0, cpu))
    assert sum(busy) < sum(alone), (alone, busy)


def _start(command: list[str], tmp_path: Path) -> tuple[subprocess.Popen, list[int], int]:
    """busy_machine.sh 2 <command that writes its pid, then waits for tmp_path/go>; (proc, neighbours, command pid)."""
    pid_file, go = tmp_path / "pid", tmp_path / "go"
    waiter = f'echo $$ > {pid_file}; while [ ! -e {go} ]; do sleep 0.05; done; {" ".join(command)}'
    proc = subprocess.Popen(["bash", SCRIPT, "2", "bash", "-c", waiter], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # printed once the neighbours run
    neighbours = [int(p) for p in re.search(r"\(pids ([0-9 ]+)\)", line).group(1).split()]
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text().endswith("\n")):
        assert proc.poll() is None and time.monotonic() < deadline, line
        time.sleep(0.05)
    return proc, neighbours, int(pid_file.read_text())


def _all_gone(pids: list[int], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while [p for p in pids if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    return not [p for p in pids if _alive(p)]


def test_neighbours_stop_when_the_command_ends(tmp_path: Path) -> None:
    proc, neighbours, command = _start(["true"], tmp_path)
    assert len(neighbours) == 2 and all(_alive(p) for p in [*neighbours, command])
    (tmp_path / "go").touch()
    assert proc.wait(timeout=60) == 0
    assert _all_gone([*neighbours, command])


def test_sigterm_stops_command_and_neighbours(tmp_path: Path) -> None:
    proc, neighbours, command = _start(["sleep", "600"], tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143  # long before the command's own 600 s
    assert _all_gone([*neighbours, command]), "a neighbour or the command survived SIGTERM"


def test_exit_status_is_the_commands() -> None:
    assert subprocess.run(["bash", SCRIPT, "1", "bash", "-c", "exit 7"], capture_output=True).returncode == 7


@pytest.mark.parametrize("n", ["-1", "two", "1.5", "65"])
def test_rejects_a_bad_count(n: str) -> None:
    proc = subprocess.run(["bash", SCRIPT, n, "true"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "N must be a whole number" in proc.stderr and n in proc.stderr


def test_needs_a_command() -> None:
    proc = subprocess.run(["bash", SCRIPT, "2"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
