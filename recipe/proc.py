"""Child processes that stop when their launcher is stopped.

The project's launchers (quickstart, the CPU study, evaluation) run their work in child processes:
the trainer, and under it a local Ray cluster. A stop request is SIGTERM (``timeout``, Slurm at the
end of an allocation, ``docker stop``), SIGINT (Ctrl-C) or SIGHUP (a closed terminal). Each child is
started in a process group of its own, so that a signal meant for the launcher's terminal does not
reach it twice; the launcher then owns the group: :func:`stop_signals_forwarded` turns a stop request
into :func:`stop_group` on every group it started, and the launcher exits with ``128 + signum``.

:func:`stop_group` asks, then tells, then kills: the chosen signal (SIGTERM by default; SIGINT lets
verl and Ray shut down cleanly), SIGTERM after a grace period when the first signal was a gentler one,
and SIGKILL for whatever is left. It returns only once the whole group is gone, not only its leader.
This module is the project's one process stopper (Python launchers); ``scripts/stoppable.sh`` is the
shell launchers'.

A job started in the background (``cmd &`` in a script, ``nohup ... &``, several schedulers) inherits
SIGINT and SIGQUIT as *ignored*, and Python keeps an inherited ignore instead of installing its
KeyboardInterrupt handler, so such a run and everything it started would ignore a group Ctrl-C or
``scancel`` SIGINT and stop only after a grace period, by SIGTERM. :func:`restore_default_signals`
undoes that; the launchers call it first thing and :func:`start_group` calls it before each start, so
a run stops the same way however it was launched (``scripts/default_signals.sh`` does it for the shell
launchers). SIGHUP is left as it is: ``nohup`` ignores it on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long a stopped group gets to exit cleanly (the trainer closes Ray and its loggers) before SIGKILL.
DEFAULT_GRACE_S = 30.0
# After a gentler first signal (SIGINT, SIGHUP): how long SIGTERM gets before SIGKILL.
TERM_GRACE_S = 10.0
# After SIGKILL: how long the leader, then the rest of the group, get to disappear (each).
KILL_WAIT_S = 10.0


class Stopped(Exception):
    """The launcher received a stop signal; its children have been stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal."""
        return 128 + self.signum


def restore_default_signals() -> list[str]:
    """Give this process back the default SIGINT and SIGQUIT where they were inherited as ignored.

    SIGINT gets Python's KeyboardInterrupt handler, SIGQUIT its default action; a handler the
    program installed is left alone, and so is SIGHUP. Children started afterwards inherit the
    default dispositions (a handler becomes the default action across ``exec``). Only the main
    thread may change handlers: elsewhere this does nothing. Returns the names it restored.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    restored = []
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL)):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, default)
            restored.append(signal.Signals(signum).name)
    return restored


def start_group(cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd)`` as the leader of a new process group (and session).

    The child gets the default SIGINT/SIGQUIT even when this process inherited them as ignored
    (:func:`restore_default_signals`), so a SIGINT to its group stops it.
    """
    restore_default_signals()
    return subprocess.Popen(list(cmd), start_new_session=True, **popen_kwargs)


def _signal_group(pgid: int, signum: int) -> bool:
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of group ``pgid``, from /proc on Linux.

    ``killpg(pgid, 0)`` also succeeds on zombies, which a container whose PID 1 does not reap keeps
    forever; on systems without /proc it is the fallback.
    """
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return [pgid] if _signal_group(pgid, 0) else []
    members = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the parenthesised command name: state, ppid, pgrp, ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def stop_timeout(grace_s: float = DEFAULT_GRACE_S, signum: int = signal.SIGTERM) -> float:
    """The longest :func:`stop_group` can take with these arguments (for a launcher above this one)."""
    return grace_s + (TERM_GRACE_S if signum != signal.SIGTERM else 0.0) + 2 * KILL_WAIT_S


def _wait_group_gone(proc: subprocess.Popen, pgid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for group ``pgid`` to be empty, reaping its leader; True when it is."""
    deadline = time.monotonic() + timeout_s
    while True:
        proc.poll()  # reap the leader so it does not linger as a zombie
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def stop_group(
    proc: subprocess.Popen, grace_s: float = DEFAULT_GRACE_S, signum: int = signal.SIGTERM
) -> None:
    """Stop ``proc``'s whole process group: ``signum``, then SIGTERM, then SIGKILL.

    ``signum`` goes to the group first and gets ``grace_s``. When it was not SIGTERM (e.g. SIGINT,
    which verl and Ray answer with a clean shut-down), SIGTERM follows and gets ``TERM_GRACE_S``.
    Whatever is left then gets SIGKILL. Waits until the group is empty (not only the leader): a
    trainer's workers can outlive it. At most :func:`stop_timeout` seconds.
    """
    pgid = proc.pid  # start_group made it the group leader
    ladder = [(signum, grace_s)]
    if signum != signal.SIGTERM:
        ladder.append((signal.SIGTERM, TERM_GRACE_S))
    for sig, wait_s in ladder:
        if not _signal_group(pgid, sig):
            proc.poll()
            return
        if _wait_group_gone(proc, pgid, wait_s):
            return
    _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_WAIT_S)
    _wait_group_gone(proc, pgid, KILL_WAIT_S)


@contextlib.contextmanager
def stop_signals_forwarded(
    procs: list[subprocess.Popen], grace_s: float = DEFAULT_GRACE_S, child_signal: int = signal.SIGTERM
) -> Iterator[list[subprocess.Popen]]:
    """While inside, a stop signal stops every group in ``procs`` (a live list) and raises :class:`Stopped`.

    Each group is stopped with :func:`stop_group` (``child_signal`` first, ``grace_s``), one after the
    other; further stop signals are ignored until that is done, so a second Ctrl-C, or a launcher's
    shell forwarding the signal it got too, cannot interrupt the clean-up. Append each child started
    with :func:`start_group` to ``procs``. The previous handlers come back on exit. Catch
    :class:`Stopped` at the top of the launcher and exit with ``exc.exit_code``.
    """
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def handler(received: int, frame: Any) -> None:
        for s in STOP_SIGNALS:  # a second signal while stopping must not interrupt the clean-up
            signal.signal(s, signal.SIG_IGN)
        for proc in procs:
            stop_group(proc, grace_s=grace_s, signum=child_signal)
        raise Stopped(received)

    for s in STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield procs
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
