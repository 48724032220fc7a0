"""Registers the ``hf`` rollout (``hf_server.HFReplica`` + ``adapter.HFServerAdapter``) in verl.

On CPU, ``recipe.cpu_backend.activation.install`` calls :func:`register` in every process. On a GPU, where
the CPU backend stays off, a run with ``actor_rollout_ref.rollout.name=hf`` gets it from
:func:`use_hf_rollout`, which ``recipe.copo.main_copo`` calls before Ray starts: it registers the
rollout in the driver and adds ``hf_plugin`` to ``VERL_USE_EXTERNAL_MODULES`` of every Ray worker
(verl/__init__.py imports the modules listed there; importing that one registers the rollout).
Importing this module does nothing.
"""

from __future__ import annotations

import os
from typing import Any

from .job_env import PROJECT_ROOT, python_path, with_module
from .vllm_rollout import ROLLOUT_NAME as VLLM_ROLLOUT

__all__ = ["PLUGIN_MODULE", "PROJECT_ROOT", "ROLLOUT_NAME", "register", "register_vllm", "use_hf_rollout", "worker_env"]

ROLLOUT_NAME = "hf"
_PACKAGE = __name__.rsplit(".", 1)[0]
PLUGIN_MODULE = f"{_PACKAGE}.hf_plugin"


def register() -> None:
    """Register rollout ``hf`` in verl's replica registry and worker-side rollout registry (idempotent)."""
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    def _load_hf_replica() -> type:
        from .hf_server import HFReplica

        return HFReplica

    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_hf_replica)
    # verl 0.9.1 has no public hook for the worker-side rollout class: this private dict
    # (verl/workers/rollout/base.py:_ROLLOUT_REGISTRY) is what get_rollout_class() reads.
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{_PACKAGE}.adapter.HFServerAdapter"


def register_vllm() -> None:
    """On CPU, verl's ``vllm`` rollout as ``vllm_sync.WatchedServerAdapter``: verl's, with a weight sync that
    ends the run when the vLLM server fails to load the weights, instead of waiting forever (vllm_sync.py says
    why). The class is a dotted name, imported (with vLLM) only by the worker that builds the rollout."""
    from verl.workers.rollout import base as rollout_base

    rollout_base._ROLLOUT_REGISTRY[(VLLM_ROLLOUT, "async")] = f"{_PACKAGE}.vllm_sync.WatchedServerAdapter"


def worker_env(env_vars: dict[str, Any]) -> dict[str, str]:
    """``env_vars`` (a Ray runtime_env's) plus what makes every worker load this module."""
    merged = {k: str(v) for k, v in env_vars.items()}
    merged["VERL_USE_EXTERNAL_MODULES"] = with_module(
        merged.get("VERL_USE_EXTERNAL_MODULES", ""), PLUGIN_MODULE
    )
    merged["PYTHONPATH"] = python_path(
        {"PYTHONPATH": merged.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))}
    )
    return merged


def use_hf_rollout(config: Any) -> bool:
    """For a run on an accelerator with ``actor_rollout_ref.rollout.name=hf``: register the rollout
    here and in every Ray worker (the job's ``ray_kwargs.ray_init.runtime_env.env_vars``). Returns
    whether it did; CPU runs (``trainer.device=cpu``) get it from the CPU backend instead."""
    from omegaconf import OmegaConf, open_dict

    if config.trainer.device == "cpu" or config.actor_rollout_ref.rollout.name != ROLLOUT_NAME:
        return False
    register()
    key = "ray_kwargs.ray_init.runtime_env.env_vars"
    current = OmegaConf.select(config, key, default=None)
    env = OmegaConf.to_container(current) if current is not None else {}
    with open_dict(config):
        OmegaConf.update(config, key, worker_env(env), force_add=True)
    return True
