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

from recipe.proc import start_group, stop_group, stop_timeout
from tests.paths import REPO

# A launcher that starts a child which starts a grandchild (both ignore nothing and sleep), writes
# their pids, then waits: the shape of quickstart -> main_copo -> Ray workers.
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys, time
    from recipe.proc import Stopped, start_group, stop_signals_forwarded

    pids_file, child_signal, ignore = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "ignore"
    # ignore: the child ignores SIGINT, so that a stop that starts with SIGINT takes the grace period
    head = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); " if ignore else ""
    tree = head + "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print(p.pid, flush=True); time.sleep(600)"
    procs = []
    try:
        with stop_signals_forwarded(procs, grace_s=5, child_signal=child_signal):
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


def _start_launcher(tmp_path: Path, child_signal: int, ignore: bool) -> tuple[subprocess.Popen, int, int]:
    pids_file = tmp_path / "pids"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(pids_file), str(int(child_signal)), "ignore" if ignore else "-"],
        cwd=REPO,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not (pids_file.exists() and pids_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child, grandchild = map(int, pids_file.read_text().split())
    assert _alive(child) and _alive(grandchild)
    return launcher, child, grandchild


def _assert_gone(*pids: int) -> None:
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_stopped_launcher_leaves_nothing(tmp_path: Path, signum: int) -> None:
    launcher, child, grandchild = _start_launcher(tmp_path, signal.SIGTERM, ignore=False)
    launcher.send_signal(signum)
    assert launcher.wait(timeout=30) == 128 + signum
    _assert_gone(child, grandchild)


@pytest.mark.parametrize("to_group", [False, True], ids=["pid", "process-group"])
def test_a_second_signal_while_stopping_does_not_abort_the_clean_up(tmp_path: Path, to_group: bool) -> None:
    """The quickstart's shape: its children get SIGINT first and this child ignores it, so the stop
    takes the grace period; meanwhile the launcher gets SIGTERM again (a second Ctrl-C, or the shell
    launcher above it forwarding what the whole group got). The clean-up must still finish."""
    launcher, child, grandchild = _start_launcher(tmp_path, signal.SIGINT, ignore=True)
    send = (lambda s: os.killpg(launcher.pid, s)) if to_group else launcher.send_signal
    send(signal.SIGTERM)
    time.sleep(1.0)  # inside the 5 s grace of SIGINT
    assert launcher.poll() is None and _alive(child)
    send(signal.SIGTERM)
    send(signal.SIGINT)
    assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
    _assert_gone(child, grandchild)


def test_stop_group_kills_what_ignores_sigterm() -> None:
    stubborn = start_group(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
        ]
    )
    time.sleep(0.5)
    started = time.monotonic()
    stop_group(stubborn, grace_s=1.0)
    assert stubborn.poll() == -signal.SIGKILL
    assert time.monotonic() - started < 15


def test_stop_group_asks_with_sigint_then_sigterm_then_sigkill() -> None:
    """SIGINT ignored: SIGTERM ends it after the grace. Both ignored: SIGKILL, within stop_timeout."""
    ignores_int = start_group(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)",
        ]
    )
    ignores_both = start_group(
        [
            sys.executable,
            "-c",
            "import signal, time; [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)];"
            " time.sleep(600)",
        ]
    )
    time.sleep(0.5)
    started = time.monotonic()
    stop_group(ignores_int, grace_s=0.5, signum=signal.SIGINT)
    assert ignores_int.poll() == -signal.SIGTERM
    assert time.monotonic() - started < 5
    started = time.monotonic()
    stop_group(ignores_both, grace_s=0.5, signum=signal.SIGINT)
    assert ignores_both.poll() == -signal.SIGKILL
    assert time.monotonic() - started <= stop_timeout(0.5, signal.SIGINT)
    with pytest.raises(ProcessLookupError):
        os.killpg(ignores_both.pid, 0)


def test_stop_group_returns_when_sigint_is_enough() -> None:
    polite = start_group([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(0.5)
    started = time.monotonic()
    stop_group(polite, grace_s=20.0, signum=signal.SIGINT)
    assert polite.poll() is not None and time.monotonic() - started < 5
