"""Run inside vLLM's worker by ``LLM.apply_model`` (so it must be importable there, not a local)."""

from __future__ import annotations

from typing import Any


def linear_weights(model: Any) -> list[tuple[str, int, bool]]:
    """(name, weight elements, has weight_loader) of every vLLM linear layer of ``model``."""
    from vllm.model_executor.layers.linear import LinearBase

    return [
        (name, module.weight.numel(), hasattr(module.weight, "weight_loader"))
        for name, module in model.named_modules()
        if isinstance(module, LinearBase)
    ]
