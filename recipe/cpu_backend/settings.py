"""The CPU backend's settings, torch-free: the ``cpu_backend.*`` keys, dtype names and thread counts.

Read by the start-up checks (``checks.py``, before Ray starts), by ``activate`` (which passes the keys
to every Ray worker as environment variables) and by the training engine (``engine.py``, which reads
them back). Standard library only, so that checking a config or starting a launcher loads no torch.
"""

from __future__ import annotations

import os
from typing import Any

# config key -> environment variable every process of the job gets ("1" / "0")
UNWRAPPED = "cpu_backend.unwrapped_single_rank"
RESPONSE_LOGITS = "cpu_backend.response_logits_only"
SETTINGS = {
    UNWRAPPED: "COPO_CPU_UNWRAPPED_SINGLE_RANK",
    RESPONSE_LOGITS: "COPO_CPU_RESPONSE_LOGITS_ONLY",
}
# The device verl's engine registry gets the CPU engine under (VERL_ENGINE_DEVICE).
ENGINE_DEVICE = "cpu"
# Intra-op threads of every process of a CPU job (default: the cores this process may run on).
THREADS_ENV = "COPO_CPU_THREADS"

_DTYPE_NAMES = {
    "float32": "fp32",
    "fp32": "fp32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
}


def enabled(key: str) -> bool:
    """Whether the job config set ``key`` (one of :data:`SETTINGS`) to true, as this process's
    environment says (``activate`` exported it)."""
    return os.environ.get(SETTINGS[key], "0").strip() == "1"


def dtype_name(name: Any) -> str:
    """The short name of a dtype as configs spell it: ``float32`` -> ``fp32``, ``bfloat16`` -> ``bf16``."""
    return _DTYPE_NAMES.get(str(name).lower(), str(name).lower())


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
