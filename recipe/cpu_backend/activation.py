"""Switch a process, and the job's Ray workers, to the CPU backend.

``activate(config)`` is called by ``recipe.copo.main_copo`` before ``ray.init`` when
``trainer.device == "cpu"``. It checks the pinned verl version and the config's CPU shortcuts,
installs the pieces below in the driver, and sets the environment that makes every Ray worker
install them too (``job_env.platform_env``):

* ``VERL_USE_EXTERNAL_MODULES=recipe.cpu_backend.plugin``: verl/__init__.py imports that module in
  every process, which runs :func:`install`.
* ``VERL_PLATFORM=cpu``: verl's platform registry picks :class:`platform.CPUPlatform`
  (auto-detection would fall back to ``nvidia``).
* ``VERL_ENGINE_DEVICE=cpu``: verl registers its FSDP engine for cuda/npu only
  (verl/workers/engine/fsdp/transformer_impl.py:1143); ``engine.py`` registers it for ``cpu``, with
  the ``cpu_backend.*`` settings of the job config (``settings.SETTINGS``). verl's engine code is
  device-agnostic once the platform answers "cpu".

:func:`install` (idempotent) registers the CPU platform, applies the two torch-level patches
(gloo process group, no pinned memory; see ``patches.py``), registers the ``sdpa_gqa`` attention
(``attention.py``), the CPU training engine (``engine.py``), the ``hf`` rollout
(``hf_server.HFReplica`` + ``adapter.HFServerAdapter``) and verl's ``vllm`` rollout with a weight sync that
fails instead of hanging (``vllm_sync.py``).
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

# The CPU backend relies on private verl details (the rollout registry dict, the process-group
# backend string, the engine registry): any verl but the pinned one fails here, up front.
from recipe.verl_pin import check_verl_version

from .job_env import platform_env, thread_env, with_plugin
from .settings import ENGINE_DEVICE, SETTINGS, worker_threads
from .vllm_rollout import uses_vllm, vllm_env

__all__ = ["activate", "install"]

_installed = False


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
    from .rollout_registry import register, register_vllm

    register()
    register_vllm()


def worker_env(config: DictConfig | None = None) -> dict[str, str]:
    """Environment every process of the job needs (driver and Ray workers alike).

    With the job's ``config``, also the ``cpu_backend.*`` settings the training engine reads from
    the environment (``settings.SETTINGS``; an absent key is false).
    """
    intra, _ = worker_threads()
    env = {
        **platform_env(os.environ),
        "VERL_ENGINE_DEVICE": ENGINE_DEVICE,
        "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "false"),
        # every process: the same intra-op threads as torch gets in install() (worker_threads)
        **thread_env(intra),
        # TransferQueue sets torch's threads around each put/get (TQ_NUM_THREADS, default 8, with a
        # warning on 2 cores) and then restores the count torch had when it was imported, which
        # OMP_NUM_THREADS above fixes; one ZeroMQ I/O thread per client instead of 8 is plenty
        # for CPU-sized batches.
        "TQ_NUM_THREADS": str(intra),
        "TQ_CLIENT_ZMQ_IO_THREADS": "1",
    }
    if config is not None:
        if uses_vllm(OmegaConf.select(config, "actor_rollout_ref.rollout.name", default=None)):
            env.update(vllm_env(os.environ))  # vllm_rollout.ENV_DEFAULTS says why each
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
    env = worker_env(config)
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
        merged = {**env, **user_env}  # the user's values win, except that the plugin must load
        merged["VERL_USE_EXTERNAL_MODULES"] = with_plugin(str(merged["VERL_USE_EXTERNAL_MODULES"]))
        OmegaConf.update(config, "ray_kwargs.ray_init.runtime_env.env_vars", merged, force_add=True)
    return config


def install_if_selected() -> None:
    """Install now when this process runs with the CPU platform selected (``VERL_PLATFORM=cpu``)."""
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
        install()
