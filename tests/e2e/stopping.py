"""Helpers for the stop tests: start a launcher with a tag in its environment, stop it, find leftovers.

Every process a launcher starts (the trainer, its local Ray cluster's daemons and workers, the
rollout server, reward workers) inherits the launcher's environment, also after it is re-parented
to init or starts a session of its own. So a unique variable marks the whole tree, and /proc shows
every process that still carries it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

TAG_VAR = "COPO_STOP_TEST_TAG"


def tagged_processes(tag: str) -> list[str]:
    """``"pid cmdline"`` of every live process whose environment holds ``TAG_VAR=tag``."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited while we looked, or not ours to read
            continue
        found.append(f"{entry.name} {cmdline[:160]}")
    return found


def start_tagged(cmd: Sequence[str], env: dict[str, str], log_path: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    """Start ``cmd`` in a session of its own (as a user's shell would run it), tagged; output to ``log_path``."""
    tag = uuid.uuid4().hex
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")  # noqa: SIM115 - the child writes to it after we return
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env={**env, TAG_VAR: tag},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc, tag


def wait_until(condition: Callable[[], bool], proc: subprocess.Popen, timeout: float, what: str, log_path: Path) -> None:
    """Poll ``condition`` until true; fail (with the log's tail) if ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before {what}:\n{log_path.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.5)


def leftovers_after(tag: str, grace_s: float = 60.0) -> list[str]:
    """Tagged processes still alive after ``grace_s`` (empty as soon as none is left)."""
    deadline = time.monotonic() + grace_s
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def kill_tagged(tag: str) -> None:
    """Clean up after a failed test, so one failure does not leave a Ray cluster for the next."""
    for line in tagged_processes(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), 9)


def sigterm_stops_stand_ins(driver: subprocess.Popen, pid_files: Sequence[Path], timeout: float = 120.0) -> None:
    """Wait until every stand-in run under ``driver`` wrote its pid to its file, SIGTERM the driver's pid
    alone, and assert that it exits 128 + SIGTERM and that no stand-in, nor anything in its group, is left."""
    import signal

    from recipe import proc

    deadline = time.monotonic() + timeout
    while not all(p.is_file() and p.read_text() for p in pid_files):
        assert time.monotonic() < deadline, "the stand-in runs did not start"
        assert driver.poll() is None, "the driver exited early"
        time.sleep(0.05)
    children = [int(p.read_text()) for p in pid_files]
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(timeout=timeout) == 128 + signal.SIGTERM
    for pid in children:
        assert not proc.group_members(pid), f"stand-in run {pid} survived SIGTERM"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            raise AssertionError(f"stand-in run {pid} is still alive after SIGTERM")
