"""Child processes that stop when their launcher is stopped.

The project's launchers (quickstart, the CPU study, evaluation) run their work in child processes:
the trainer, and under it a local Ray cluster. A stop request is SIGTERM (``timeout``, Slurm at the
end of an allocation, ``docker stop``), SIGINT (Ctrl-C) or SIGHUP (a closed terminal). Each child is
started in a process group of its own, so that a signal meant for the launcher's terminal does not
reach it twice; the launcher then owns the group: :func:`stop_signals_forwarded` turns a stop request
into :func:`stop_group` on every group it started, and the launcher exits with ``128 + signum``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long a stopped group gets to exit cleanly (the trainer closes Ray and its loggers) before SIGKILL.
DEFAULT_GRACE_S = 30.0


class Stopped(Exception):
    """The launcher received a stop signal; its children have been stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal."""
        return 128 + self.signum


def start_group(cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd)`` as the leader of a new process group (and session)."""
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


def stop_group(proc: subprocess.Popen, grace_s: float = DEFAULT_GRACE_S, signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to ``proc``'s whole process group; SIGKILL what is left after ``grace_s``.

    Waits until the group is empty (not only the leader): a trainer's workers can outlive it.
    """
    pgid = proc.pid  # start_group made it the group leader
    if not _signal_group(pgid, signum):
        proc.poll()
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader so it does not linger as a zombie
        if not _group_alive(pgid):
            return
        time.sleep(0.2)
    _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


@contextlib.contextmanager
def stop_signals_forwarded(
    procs: list[subprocess.Popen], grace_s: float = DEFAULT_GRACE_S
) -> Iterator[list[subprocess.Popen]]:
    """While inside, a stop signal stops every group in ``procs`` (a live list) and raises :class:`Stopped`.

    Append each child started with :func:`start_group` to ``procs``. The previous handlers come back
    on exit. Catch :class:`Stopped` at the top of the launcher and exit with ``exc.exit_code``.
    """
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def handler(signum: int, frame: Any) -> None:
        for s in STOP_SIGNALS:  # a second signal while stopping must not interrupt the clean-up
            signal.signal(s, signal.SIG_IGN)
        for proc in procs:
            stop_group(proc, grace_s=grace_s)
        raise Stopped(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield procs
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
