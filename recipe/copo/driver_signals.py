"""The trainer's driver stops once: a first stop signal ends it cleanly, further ones are ignored.

A terminal's Ctrl-C and Slurm's ``scancel`` signal every process of the launcher's group, often twice
in quick succession (a second Ctrl-C, a shell forwarding what it got). ``ray.init`` installs a SIGTERM
handler in the driver that calls ``sys.exit``; a second SIGTERM then lands inside the interpreter's
shut-down (Ray's atexit hook, C extensions tearing down) and the driver died with SIGSEGV, a core file
and no clean exit code. While :func:`stop_once` is active, the first SIGTERM/SIGINT/SIGHUP makes every
stop signal ignored and raises ``SystemExit(128 + signum)``: Ray's own clean-up (``ray.shutdown`` at exit,
its fate-sharing children) runs to the end, and the signals stay ignored until the process has exited.
``ray.init`` is wrapped so that the handler it installs is replaced by this one as soon as it returns.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import ray

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


_received: list[int] = []  # the stop signal that ended the driver, once there is one


def _stop(signum: int, frame: Any) -> None:
    _received.append(signum)
    for s in STOP_SIGNALS:  # the clean-up must not be re-entered by a second signal
        signal.signal(s, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _install() -> None:
    for s in STOP_SIGNALS:
        signal.signal(s, _stop)


@contextlib.contextmanager
def stop_once() -> Iterator[None]:
    """While inside (main thread only), stop signals end the driver once, as described above."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    real_init = ray.init

    def init(*args: Any, **kwargs: Any) -> Any:
        result = real_init(*args, **kwargs)
        _install()  # ray.init just put its own SIGTERM handler in place
        return result

    _install()
    ray.init = init
    try:
        yield
    except BaseException:
        if _received:  # ray.get turns the handler's SystemExit into SystemExit(1): give the signal's code back
            raise SystemExit(128 + _received[0]) from None
        raise
    finally:
        ray.init = real_init
        if not _received:  # once stopping, signals stay ignored until the process has exited
            for s, handler in previous.items():
                signal.signal(s, handler)
