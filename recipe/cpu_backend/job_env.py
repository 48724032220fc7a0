"""The environment of a CPU training job: one function for every launcher, and its parts for ``activate``.

A launcher (the quickstart, the testbed study's runs) starts ``python -m recipe.copo.main_copo`` with
:func:`cpu_job_env`: offline, unbuffered, this checkout importable, the CPU backend selected before
verl starts (``VERL_PLATFORM=cpu`` and :data:`PLUGIN_MODULE` in ``VERL_USE_EXTERNAL_MODULES``, which
verl/__init__.py imports in every process), and optionally a thread count. ``activate`` then passes the
same platform and thread variables (:func:`platform_env`, :func:`thread_env`) to every Ray worker.
Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from recipe.files import REPO_ROOT

from .settings import THREADS_ENV

PROJECT_ROOT = str(REPO_ROOT)
# What verl/__init__.py imports in every process of a CPU job (it installs the backend there).
PLUGIN_MODULE = "recipe.cpu_backend.plugin"
# Set unless the caller's environment already sets them.
OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}


def _with_first(items: str, item: str, sep: str, first: bool) -> str:
    """``items`` (a ``sep``-separated list) with ``item`` in it: added first or last when absent."""
    parts = [p for p in items.split(sep) if p]
    if item in parts:
        return sep.join(parts)
    return sep.join([item, *parts] if first else [*parts, item])


def python_path(env: Mapping[str, str]) -> str:
    """``env``'s PYTHONPATH with this checkout first (Ray's workers do not start in it)."""
    return _with_first(env.get("PYTHONPATH", ""), PROJECT_ROOT, os.pathsep, first=True)


def with_module(modules: str, module: str) -> str:
    """A ``VERL_USE_EXTERNAL_MODULES`` value (comma-separated modules) with ``module`` in it (last if added)."""
    return _with_first(modules, module, ",", first=False)


def with_plugin(modules: str) -> str:
    """A ``VERL_USE_EXTERNAL_MODULES`` value with :data:`PLUGIN_MODULE` in it."""
    return with_module(modules, PLUGIN_MODULE)


def platform_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that select the CPU backend in every process that imports verl.

    ``VERL_USE_EXTERNAL_MODULES`` keeps ``env``'s own modules and adds :data:`PLUGIN_MODULE`.
    """
    return {
        "VERL_PLATFORM": "cpu",
        "VERL_USE_EXTERNAL_MODULES": with_plugin(env.get("VERL_USE_EXTERNAL_MODULES", "")),
        "PYTHONPATH": python_path(env),
    }


def thread_env(threads: int) -> dict[str, str]:
    """Intra-op threads of every process: torch (``COPO_CPU_THREADS``, read by ``worker_threads``),
    OpenMP and MKL."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return {THREADS_ENV: str(threads), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def cpu_job_env(
    base: Mapping[str, str] | None = None, *, threads: int | None = None, platform: bool = True
) -> dict[str, str]:
    """The environment of a CPU training process started by a launcher.

    Args:
        base: the environment to start from (default: this process's). ``{}`` gives only what this adds.
        threads: intra-op threads per process (:func:`thread_env`); None leaves ``base``'s.
        platform: select the CPU backend before verl starts (:func:`platform_env`). False leaves that
            to ``main_copo`` (``trainer.device=cpu`` activates it), as a user's plain command does.

    Returns:
        ``base`` with :data:`OFFLINE_DEFAULTS` where unset, this checkout on ``PYTHONPATH``, the
        platform and thread variables, and without an empty ``CUDA_VISIBLE_DEVICES`` (Ray refuses
        its logical GPU, the CPU worker slot, when the variable is set but empty).
    """
    env = dict(os.environ if base is None else base)
    for key, value in OFFLINE_DEFAULTS.items():
        env.setdefault(key, value)
    env["PYTHONPATH"] = python_path(env)
    if platform:
        env.update(platform_env(env))
    if threads is not None:
        env.update(thread_env(threads))
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        del env["CUDA_VISIBLE_DEVICES"]
    return env
