"""Generation backends and the ``--backend auto|hf|vllm`` choice.

Heavy imports (torch, transformers, vLLM) happen when a backend is built, not here, so the
vLLM worker processes and ``--help`` start fast.
"""

from __future__ import annotations

from .base import Backend, Completion, SamplingConfig

BACKENDS = ("auto", "hf", "vllm")


def choose_backend(kind: str) -> str:
    """``auto`` -> ``vllm`` when vLLM is installed and a GPU is visible, else ``hf``."""
    if kind not in BACKENDS:
        raise ValueError(f"--backend must be one of {BACKENDS}, got {kind!r}")
    if kind != "auto":
        return kind
    from .vllm_backend import visible_gpu_ids, vllm_available

    return "vllm" if vllm_available() and visible_gpu_ids() else "hf"


def make_backend(
    kind: str, model_path: str, *, batch_size: int = 16, dtype: str = "auto", vllm_engine: str | None = None
) -> Backend:
    """Build a loaded backend for one model (``kind`` already resolved by ``choose_backend``).

    ``vllm_engine`` (``module:Class``) replaces ``vllm.LLM`` in the vLLM workers (None: vLLM itself).
    """
    if kind == "hf":
        from .hf_backend import HFBackend

        return HFBackend(model_path, batch_size=batch_size, dtype=dtype)
    if kind == "vllm":
        from .vllm_backend import DEFAULT_ENGINE, VLLMBackend

        return VLLMBackend(model_path, engine=vllm_engine or DEFAULT_ENGINE, dtype=dtype)
    raise ValueError(f"backend {kind!r} is not buildable; call choose_backend first")


__all__ = ["BACKENDS", "Backend", "Completion", "SamplingConfig", "choose_backend", "make_backend"]
