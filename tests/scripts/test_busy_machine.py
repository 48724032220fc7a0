"""scripts/busy_machine.sh: the command competes with N busy neighbours, and they stop with it.

The share test spins one thread of Python for a fixed wall time and reads the CPU seconds it got:
alone on the cores it gets nearly all of them; with more busy neighbours than cores it gets a
fair share at most.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.paths import REPO

SCRIPT = str(REPO / "scripts" / "busy_machine.sh")
# Spins for argv[1] seconds of wall time and prints the CPU seconds it got.
SPIN = "import sys,time; w=float(sys.argv[1]); t=time.time()\nwhile time.time()-t<w: pass\nprint(time.process_time())"


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


def test_neighbours_take_the_commands_cpu_share() -> None:
    cores = os.cpu_count() or 1
    neighbours = 3 * cores
    alone = subprocess.run([sys.executable, "-c", SPIN, "1.5"], capture_output=True, text=True, check=True)
    busy = subprocess.run(
        ["bash", SCRIPT, str(neighbours), sys.executable, "-c", SPIN, "1.5"],
        capture_output=True,
        text=True,
        check=True,
    )
    cpu_alone, cpu_busy = float(alone.stdout), float(busy.stdout)
    # Fair share with 3x as many neighbours as cores: ~cores / (neighbours + 1) of 1.5 s = ~0.46 s.
    assert cpu_alone > 1.0, cpu_alone
    assert cpu_busy < 0.75, (cpu_alone, cpu_busy)
    assert f"{neighbours} busy neighbour processes" in busy.stderr


def test_neighbours_stop_when_the_command_ends() -> None:
    proc = subprocess.Popen(["bash", SCRIPT, "2", "sleep", "1"], stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    children = _children(proc.pid)
    assert len(children) >= 3  # two neighbours and the command
    assert proc.wait(timeout=10) == 0
    time.sleep(0.2)
    assert not [p for p in children if _alive(p)]


def test_sigterm_stops_command_and_neighbours() -> None:
    proc = subprocess.Popen(["bash", SCRIPT, "2", "sleep", "60"], stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    children = _children(proc.pid)
    assert len(children) >= 3
    start = time.time()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 143
    assert time.time() - start < 5
    time.sleep(0.2)
    assert not [p for p in children if _alive(p)], "a neighbour or the command survived SIGTERM"


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
