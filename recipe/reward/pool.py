"""A bounded, killable pool of math-verify worker processes, safe to call from any thread.

Why not ``signal.alarm`` (math-verify's default): it only works in the main thread, so it fails in
verl's reward-loop executor threads, in Ray actors with ``max_concurrency > 1`` and in async actors.
Why not a ``ProcessPoolExecutor`` with ``future.result(timeout)``: a timed-out task keeps running and
holds its worker (a hung sympy computation does not release the GIL and cannot be interrupted), so
the pool silently shrinks. Here each worker is a child process with its own pipes; a request that
runs past the limit gets its worker killed and replaced, the call returns ``timed_out=True``.

Workers are started lazily, all at once, on first use; each reports "ready" after its imports so the
one-off start-up (about 1 s) never counts against a request's time limit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VerifyResult", "VerifyPool"]

_WORKER_SCRIPT = str(Path(__file__).with_name("_worker.py"))
_STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one verification: ``ok`` (equivalent), ``timed_out``, ``error`` (message), and
    ``crashed`` (the worker died or never started: an infrastructure failure, not a verdict)."""

    ok: bool
    timed_out: bool = False
    error: str | None = None
    crashed: bool = False


class _Worker:
    """One child process and a byte buffer for its line-oriented replies."""

    def __init__(self) -> None:
        env = dict(os.environ)
        # one thread per worker: the pool already provides the parallelism
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            # -I: isolated mode, so the script's folder never shadows what math-verify imports
            [sys.executable, "-I", "-u", _WORKER_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        self._buf = b""
        self._ready = False

    def _read_line(self, deadline: float) -> bytes | None:
        """Next reply line, or None if ``deadline`` (monotonic) passes or the worker died."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # EOF: the worker exited
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def wait_ready(self) -> bool:
        if not self._ready:
            line = self._read_line(time.monotonic() + _STARTUP_TIMEOUT_S)
            self._ready = line is not None and json.loads(line).get("ready", False)
        return self._ready

    def request(self, gold: str, pred: str, timeout_s: float) -> dict | None:
        """Send one request; the decoded reply, or None on timeout / worker death."""
        payload = (json.dumps({"gold": gold, "pred": pred}) + "\n").encode("utf-8")
        try:
            self.proc.stdin.write(payload)
            self.proc.stdin.flush()
        except (OSError, ValueError):  # broken pipe, or the pipe was closed by close()
            return None
        line = self._read_line(time.monotonic() + timeout_s)
        return None if line is None else json.loads(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored; just in case
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()


class VerifyPool:
    """``size`` math-verify workers; ``verify(gold, pred, timeout_s)`` blocks for a free one.

    Thread-safe: concurrent callers (verl's executor threads, a batch fan-out) each take an idle
    worker, so up to ``size`` verifications run in parallel on separate cores.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"VerifyPool size must be >= 1, got {size}")
        self.size = size
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._pid = os.getpid()
        self.timeouts = 0
        self.restarts = 0
        self.calls = 0

    def _spawn(self) -> _Worker:
        worker = _Worker()
        with self._lock:
            self._all.add(worker)
        return worker

    def _ensure_started(self) -> None:
        if self._started:
            return
        with self._lock:
            if self._started:
                return
            if self._closed:
                raise RuntimeError("VerifyPool was closed; create a new one")
            self._started = True
        workers = [self._spawn() for _ in range(self.size)]  # start in parallel, then wait
        for worker in workers:
            self._idle.put(worker)
        atexit.register(self.close)

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)
            self.restarts += 1
            closed = self._closed
        if not closed:
            self._idle.put(self._spawn())

    def verify(self, gold: str, pred: str, timeout_s: float) -> VerifyResult:
        """Whether ``pred`` equals ``gold`` per math-verify, within ``timeout_s`` seconds of worker time."""
        if os.getpid() != self._pid:
            raise RuntimeError("VerifyPool is not fork-safe: create it in the process that uses it")
        if self._closed:
            raise RuntimeError("VerifyPool was closed; create a new one")
        self._ensure_started()
        worker = self._idle.get()
        with self._lock:
            self.calls += 1
        if not worker.wait_ready():
            self._replace(worker)
            return VerifyResult(ok=False, error="worker failed to start", crashed=True)
        reply = worker.request(gold, pred, timeout_s)
        if reply is None:
            timed_out = worker.proc.poll() is None  # still running: it ran past the limit
            with self._lock:
                self.timeouts += int(timed_out)
            self._replace(worker)
            if timed_out:
                return VerifyResult(ok=False, timed_out=True)
            return VerifyResult(ok=False, error="worker died", crashed=True)
        self._idle.put(worker)
        return VerifyResult(ok=bool(reply.get("ok")), error=reply.get("error"))

    def close(self) -> None:
        """Kill every worker. Idempotent; also registered with ``atexit``."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        for worker in workers:
            worker.kill()
