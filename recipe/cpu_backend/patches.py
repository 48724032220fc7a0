"""Two torch-level patches that let verl 0.9.1's FSDP2 engine run without an accelerator.

Both wrap torch objects (never verl files), are idempotent, and only change behaviour in the
exact situation they answer, so they are harmless if a later verl stops needing them.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed

_PATCHED_ATTR = "_copo_cpu_patched"


def _plain_gloo(backend: Any) -> Any:
    """``"cpu:gloo,cpu:gloo"`` -> ``"gloo"``; anything else unchanged.

    verl/utils/distributed.py:90 builds ``f"cpu:gloo,{device}:{backend}"``; with device "cpu" the
    same device appears twice and torch rejects the mapping.
    """
    if not isinstance(backend, str) or "," not in backend:
        return backend
    parts = {p.strip() for p in backend.split(",")}
    if all(p.endswith(":gloo") or p == "gloo" for p in parts):
        return "gloo"
    return backend


def patch_process_group() -> None:
    """Wrap ``torch.distributed.init_process_group`` to collapse a CPU-only backend map to gloo."""
    original = torch.distributed.init_process_group
    if getattr(original, _PATCHED_ATTR, False):
        return

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = _plain_gloo(kwargs["backend"])
        elif args:
            args = (_plain_gloo(args[0]), *args[1:])
        return original(*args, **kwargs)

    setattr(init_process_group, _PATCHED_ATTR, True)
    torch.distributed.init_process_group = init_process_group


def patch_cpu_offload_pin_memory() -> None:
    """Force ``CPUOffloadPolicy(pin_memory=False)``: pinning needs an accelerator.

    verl/workers/engine/fsdp/transformer_impl.py:462 builds ``CPUOffloadPolicy(pin_memory=True)``
    for the reference model (forward_only). The class object is patched, so the name verl
    imported from verl.utils.fsdp_utils sees it regardless of import order.
    """
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy
    except ImportError:  # torch < 2.6: verl would not run FSDP2 anyway
        return
    original_init = CPUOffloadPolicy.__init__
    if getattr(original_init, _PATCHED_ATTR, False):
        return

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if not torch.cuda.is_available():
            self.pin_memory = False

    setattr(__init__, _PATCHED_ATTR, True)
    CPUOffloadPolicy.__init__ = __init__


def apply_all() -> None:
    patch_process_group()
    patch_cpu_offload_pin_memory()
