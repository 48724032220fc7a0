"""The process groups an evaluation starts (vLLM engine workers, verl's model merger), so that a stop
request (SIGTERM from ``timeout``/Slurm/``docker stop``, Ctrl-C) stops them all.

Each child is started with :func:`recipe.proc.start_group` (its own process group: vLLM's engine
processes under a worker are stopped with it) and listed in :data:`CHILDREN` while it runs;
``scripts/evaluate.py`` hands that live list to :func:`recipe.proc.stop_signals_forwarded`.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from typing import Any

from recipe.proc import start_group

CHILDREN: list[subprocess.Popen] = []


def start(cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen:
    """Start ``cmd`` as a process group of its own and list it in :data:`CHILDREN`."""
    proc = start_group(cmd, **popen_kwargs)
    CHILDREN.append(proc)
    return proc


def forget(proc: subprocess.Popen) -> None:
    """Drop a finished (or stopped) child from :data:`CHILDREN`."""
    with contextlib.suppress(ValueError):
        CHILDREN.remove(proc)
