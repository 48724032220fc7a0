"""A CPU platform for verl 0.9.1's platform registry (verl/plugin/platform/platform_manager.py).

Without it verl's auto-detection falls back to ``nvidia`` on a machine with no accelerator and
every ``get_torch_device().<fn>()`` lands in ``torch.cuda``. Selected with ``VERL_PLATFORM=cpu``.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


def _mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
    """(free, total) bytes of host memory; verl logs it around weight syncs."""
    try:
        pages, free_pages = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_AVPHYS_PAGES")
        page = os.sysconf("SC_PAGE_SIZE")
        return free_pages * page, pages * page
    except (ValueError, OSError):
        return 0, 0


def _build_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda``-style functions verl calls on its device module.

    A separate module object, so ``torch.cpu`` itself is never modified. The additions are the
    calls found by ``grep get_torch_device()`` in verl 0.9.1 (empty_cache, mem_get_info, rng state,
    memory stats, ipc_collect ...); on CPU they are no-ops or host-wide equivalents.
    """
    module = types.ModuleType("copo_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    module.is_available = lambda: True
    module.device_count = lambda: 1
    # verl moves tensors with `.to(get_device_id())`: an int would mean cuda:<n> (fsdp_utils.py:507).
    module.current_device = lambda: "cpu"
    module.set_device = _noop
    module.synchronize = _noop
    module.empty_cache = _noop
    module.ipc_collect = _noop
    module.set_per_process_memory_fraction = _noop
    module.mem_get_info = _mem_get_info
    module.get_device_name = lambda *a, **k: "cpu"
    module.get_rng_state = lambda *a, **k: torch.get_rng_state()
    module.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    for stat in (
        "memory_allocated",
        "memory_reserved",
        "max_memory_allocated",
        "max_memory_reserved",
    ):
        setattr(module, stat, _zero)
    module.reset_peak_memory_stats = _noop
    module.memory_stats = lambda *a, **k: {}
    return module


_DEVICE_MODULE = _build_device_module()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class CPUPlatform(PlatformBase):
    """verl platform whose "device" is the host CPU; collectives run over gloo."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: the CPU path is chosen explicitly (VERL_PLATFORM=cpu), so a GPU
        # machine with this package imported keeps its CUDA platform.
        return False

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # ResourcePoolManager counts only GPU/NPU resources (single_controller/ray/base.py:210,226);
        # the Ray cluster is started with one *logical* GPU that stands for the CPU worker slot.
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
