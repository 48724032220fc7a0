"""Run verl 0.9.1's real trainer on CPU (no accelerator), with nothing edited inside verl.

``activate(config)`` is called by ``recipe.copo.main_copo`` before ``ray.init`` when
``trainer.device == "cpu"``. It checks the pinned verl version, installs the pieces below in
the driver, and sets the environment that makes every Ray worker install them too:

* ``VERL_USE_EXTERNAL_MODULES=recipe.cpu_backend``: verl/__init__.py imports this package in
  every process, which runs :func:`install`.
* ``VERL_PLATFORM=cpu``: verl's platform registry picks :class:`platform.CPUPlatform`
  (auto-detection would fall back to ``nvidia``).
* ``VERL_ENGINE_DEVICE=cpu``: verl registers its FSDP engine for cuda/npu only
  (verl/workers/engine/fsdp/transformer_impl.py:1143); ``engine.py`` registers it for ``cpu``, with
  the ``cpu_backend.*`` settings of the job config. verl's engine code is device-agnostic once the
  platform answers "cpu".

:func:`install` (idempotent) registers the CPU platform, applies the two torch-level patches
(gloo process group, no pinned memory; see ``patches.py``), registers the ``sdpa_gqa`` attention
(``attention.py``), the CPU training engine (``engine.py``) and the ``hf`` rollout
(``hf_server.HFReplica`` + ``adapter.HFServerAdapter``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

# The CPU backend relies on private verl details (the rollout registry dict, the process-group
# backend string, the engine registry): any verl but the pinned one fails here, up front.
from recipe.verl_pin import REQUIRED_VERL_FILE, check_verl_version

from .engine import ENGINE_DEVICE, SETTINGS
from .rollout_registry import ROLLOUT_NAME

__all__ = [
    "activate",
    "install",
    "check_verl_version",
    "worker_threads",
    "ROLLOUT_NAME",
    "REQUIRED_VERL_FILE",
    "THREADS_ENV",
]

MODULE_NAME = __name__

_installed = False

# Intra-op threads of every process of a CPU job (default: the cores this process may run on).
THREADS_ENV = "COPO_CPU_THREADS"


def worker_threads() -> tuple[int, int]:
    """(intra-op, inter-op) torch threads of each process of a CPU job.

    verl's sync trainer runs its heavy phases one after another (rollout server, then the actor
    worker), so the process that computes gets every core for its matmuls (intra-op) and the
    others sleep. Inter-op parallelism is 1: the graph of a decoder forward is a chain, and a
    second pool per process would only add threads that compete for the same cores. The
    light processes (driver, agent loop, reward loop, TransferQueue) get the same settings and
    stay idle while the heavy ones compute. ``COPO_CPU_THREADS`` sets the intra-op count (e.g. 1
    to run several jobs side by side), else ``OMP_NUM_THREADS`` where the launcher set it.
    """
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value:
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{name}={value!r}: expected a positive integer (threads per process)")
            return int(value), 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores), 1


def _apply_threads() -> None:
    import contextlib

    import torch

    intra, inter = worker_threads()
    torch.set_num_threads(intra)
    with contextlib.suppress(RuntimeError):  # inter-op pool already started in this process
        torch.set_num_interop_threads(inter)


def install() -> None:
    """Register the CPU platform, the torch patches and the ``hf`` rollout in this process."""
    global _installed
    if _installed:
        return
    from . import attention, engine, patches, platform  # noqa: F401  (platform registers itself on import)

    patches.apply_all()
    attention.register()
    engine.install()
    _apply_threads()
    _register_rollout()
    _installed = True


def _register_rollout() -> None:
    from .rollout_registry import register

    register()


PROJECT_ROOT = str(Path(__file__).resolve().parent.parent.parent)


def _worker_env(config: DictConfig | None = None) -> dict[str, str]:
    """Environment every process of the job needs (driver and Ray workers alike).

    With the job's ``config``, also the ``cpu_backend.*`` settings the training engine reads from
    the environment (``engine.SETTINGS``; an absent key is false).
    """
    project_root = PROJECT_ROOT
    intra, _ = worker_threads()
    pythonpath = os.environ.get("PYTHONPATH", "")
    if project_root not in pythonpath.split(os.pathsep):
        pythonpath = os.pathsep.join(p for p in (project_root, pythonpath) if p)
    modules = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if MODULE_NAME not in modules:
        modules.append(MODULE_NAME)
    env = {
        "VERL_USE_EXTERNAL_MODULES": ",".join(modules),
        "VERL_PLATFORM": "cpu",
        "VERL_ENGINE_DEVICE": ENGINE_DEVICE,
        # Ray workers must import `recipe` from this checkout (Ray's cwd is not on sys.path).
        "PYTHONPATH": pythonpath,
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "false"),
        # every process: the same intra-op threads as torch gets in install() (worker_threads)
        THREADS_ENV: str(intra),
        "OMP_NUM_THREADS": str(intra),
        "MKL_NUM_THREADS": str(intra),
        # TransferQueue sets torch's threads around each put/get (TQ_NUM_THREADS, default 8, with a
        # warning on 2 cores) and then restores the count torch had when it was imported, which
        # OMP_NUM_THREADS above fixes; one ZeroMQ I/O thread per client instead of 8 is plenty
        # for CPU-sized batches.
        "TQ_NUM_THREADS": str(intra),
        "TQ_CLIENT_ZMQ_IO_THREADS": "1",
    }
    if config is not None:
        for key, name in SETTINGS.items():
            env[name] = "1" if OmegaConf.select(config, key, default=False) else "0"
    return env


def _select_cpu_platform() -> None:
    """Make the driver's platform singleton the CPU one even if verl already resolved another."""
    from verl.plugin.platform import platform_manager

    from .platform import CPUPlatform

    current = platform_manager._current_platform
    if not isinstance(current, CPUPlatform):
        platform_manager.set_platform(CPUPlatform())


def activate(config: DictConfig | None = None) -> DictConfig | None:
    """Switch this process and the job's Ray workers to the CPU backend.

    Args:
        config: the job's composed Hydra config (or None to only set up this process).

    Returns:
        ``config`` with ``trainer.device=cpu`` and the env vars above added to
        ``ray_kwargs.ray_init.runtime_env.env_vars``; None when ``config`` is None.
    """
    check_verl_version()
    if config is not None:
        from .checks import check_cpu_config

        check_cpu_config(config)
    # Ray refuses a logical GPU when CUDA_VISIBLE_DEVICES is set but empty (a common way to hide
    # GPUs): "Attempting to start raylet with 1 GPU, but CUDA_VISIBLE_DEVICES contains []".
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        del os.environ["CUDA_VISIBLE_DEVICES"]
    env = _worker_env(config)
    os.environ.update(env)
    install()
    _apply_threads()  # again: install() runs once per process, the threads may have changed since
    _select_cpu_platform()
    if config is None:
        return None
    with open_dict(config):
        config.trainer.device = "cpu"
        runtime_env = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env", default=None)
        if runtime_env is None:
            OmegaConf.update(config, "ray_kwargs.ray_init.runtime_env", {}, force_add=True)
        env_vars: Any = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars", default=None)
        user_env = OmegaConf.to_container(env_vars) if env_vars is not None else {}
        merged = {**env, **user_env}  # the user's values win, except that this module must load
        modules = [m for m in str(merged["VERL_USE_EXTERNAL_MODULES"]).split(",") if m]
        merged["VERL_USE_EXTERNAL_MODULES"] = ",".join(
            [*modules, MODULE_NAME] if MODULE_NAME not in modules else modules
        )
        OmegaConf.update(config, "ray_kwargs.ray_init.runtime_env.env_vars", merged, force_add=True)
    return config


# Imported by verl/__init__.py in a Ray worker (VERL_USE_EXTERNAL_MODULES) or explicitly by the
# driver: in a process where the CPU platform is selected, install everything right away.
if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    install()
