"""``python -m recipe.copo.main_copo`` of a :class:`~recipe.launch.spec.RunSpec`, started as the
leader of its own process group (``recipe.proc``: a stop reaches the trainer, Ray and the rollout
server together)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from recipe.files import REPO_ROOT
from recipe.launch.spec import RunSpec
from recipe.proc import start_group

MODULE = "recipe.copo.main_copo"  # the trainer's entry point, run by module name (a new process)


def command(spec: RunSpec, python: str = sys.executable) -> list[str]:
    """The trainer's command line for ``spec``."""
    return [python, "-m", MODULE, *spec.argv()]


def start(spec: RunSpec, *, python: str = sys.executable, **popen_kwargs: Any) -> subprocess.Popen:
    """Start the trainer of ``spec`` in a new process group, from the checkout's root unless ``cwd``
    is given; ``popen_kwargs`` go to ``subprocess.Popen`` (env, stdout, stderr)."""
    popen_kwargs.setdefault("cwd", REPO_ROOT)
    return start_group(command(spec, python), **popen_kwargs)
