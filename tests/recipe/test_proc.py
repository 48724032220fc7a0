"""recipe.proc: a stopped launcher stops every process it started, grandchildren included."""

from __future__ import annotations

import contextlib
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
    # ignore: the child ignores SIGINT (noting its arrival in <pids_file>.sigint), so that a stop that
    # starts with SIGINT takes the grace period
    head = (
        "import signal; signal.signal(signal.SIGINT, lambda *a: open(sys.argv[1], 'w').close()); "
        if ignore
        else ""
    )
    tree = "import sys; " + head + "import subprocess, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print(p.pid, flush=True); time.sleep(600)"
    procs = []
    try:
        with stop_signals_forwarded(procs, grace_s=10, child_signal=child_signal):
            child = start_group([sys.executable, "-c", tree, pids_file + ".sigint"], stdout=subprocess.PIPE, text=True)
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
    marker = tmp_path / "pids.sigint"  # the child got its SIGINT: the 10-s grace has begun
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the child never got the launcher's SIGINT"
        time.sleep(0.05)
    assert launcher.poll() is None and _alive(child)
    send(signal.SIGTERM)
    send(signal.SIGINT)
    assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
    _assert_gone(child, grandchild)


def _start_ready(code: str) -> subprocess.Popen:
    """start_group(python -c code) once the child has run ``code``'s set-up (it prints READY)."""
    child = start_group(
        [sys.executable, "-c", code + "; print('READY', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "READY"
    return child


def test_stop_group_kills_what_ignores_sigterm() -> None:
    stubborn = _start_ready("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    started = time.monotonic()
    stop_group(stubborn, grace_s=1.0)
    assert stubborn.poll() == -signal.SIGKILL
    assert time.monotonic() - started < 15


def test_stop_group_asks_with_sigint_then_sigterm_then_sigkill() -> None:
    """SIGINT ignored: SIGTERM ends it after the grace. Both ignored: SIGKILL, within stop_timeout."""
    ignores_int = _start_ready("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN)")
    ignores_both = _start_ready(
        "import signal, time; [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]"
    )
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
    polite = _start_ready("import time")
    stop_group(polite, grace_s=600.0, signum=signal.SIGINT)
    # it ended by SIGINT (KeyboardInterrupt), not by the SIGTERM that follows the grace
    assert polite.poll() not in (None, -signal.SIGTERM, -signal.SIGKILL)


def _ignored(pid: int) -> set[str]:
    """Names of the signals ``pid`` ignores (SigIgn in /proc/<pid>/status)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:"))
    mask = int(line.split()[1], 16)
    names = set()
    for n in range(1, 32):
        if mask >> (n - 1) & 1:
            with contextlib.suppress(ValueError):  # numbers without a name in this Python
                names.add(signal.Signals(n).name)
    return names


def test_start_group_gives_children_the_default_sigint_when_it_was_inherited_ignored() -> None:
    """As from a background job: the parent ignores SIGINT/SIGQUIT; its start_group children do not."""
    code = textwrap.dedent(
        """
        import signal, subprocess, sys
        from recipe.proc import start_group
        for s in (signal.SIGINT, signal.SIGQUIT):
            signal.signal(s, signal.SIG_IGN)
        plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        child = start_group([sys.executable, "-c", "import time; time.sleep(600)"])
        print(plain.pid, child.pid, flush=True)
        sys.stdin.read()
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        plain, child = map(int, parent.stdout.readline().split())
        # the control: a plain Popen inherits the ignore (what made the stop tests wait out their grace)
        assert {"SIGINT", "SIGQUIT"} <= _ignored(plain)
        assert not {"SIGINT", "SIGQUIT"} & _ignored(child)
    finally:
        for pid in (plain, child):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def test_a_launcher_started_in_the_background_stops_on_a_group_sigint(tmp_path: Path) -> None:
    """``launcher &`` in a non-interactive shell gives it SIGINT ignored; a group SIGINT still stops
    the launcher, its child and grandchild by SIGINT, long before the SIGTERM that follows the grace."""
    pids_file = tmp_path / "pids"
    shell = subprocess.Popen(
        # the control: a background command beside it records its own SigIgn (a trap-less `&` in bash)
        ["bash", "-c", 'grep SigIgn /proc/self/status > "$0.control" & "$@" & echo $! > "$0.launcher"; wait',
         str(pids_file), sys.executable, "-c",
         LAUNCHER.replace("grace_s=10", "grace_s=600"), str(pids_file), str(int(signal.SIGINT)), "-"],
        cwd=REPO,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        control_file = Path(f"{pids_file}.control")
        while not (pids_file.exists() and pids_file.read_text().strip() and control_file.exists()
                   and control_file.read_text().endswith("\n")):
            assert shell.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        launcher = int(Path(f"{pids_file}.launcher").read_text())
        child, grandchild = map(int, pids_file.read_text().split())
        control = int(control_file.read_text().split()[1], 16)
        assert control & (1 << (signal.SIGINT - 1)), "a background command should start with SIGINT ignored"
        os.killpg(shell.pid, signal.SIGINT)
        shell.wait(timeout=300)  # far below the 600-s grace after which SIGTERM would end them
        _assert_gone(launcher, child, grandchild)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
