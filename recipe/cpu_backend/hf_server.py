"""HF-transformers rollout server: a Ray actor that verl's agent loop talks to like a vLLM server.

verl 0.9.1 only generates through rollout *servers* (vllm/sglang/trtllm, registered in
verl/workers/rollout/replica.py:388-390); none runs on CPU. This module provides the same
surface with plain transformers:

* ``HFRolloutServer.generate(prompt_ids, sampling_params, request_id, ...) -> TokenOutput``
  (token-in/token-out with per-token log-probs). Requests are decoded with continuous batching:
  one that arrives while others decode joins the running batch at the next decode step, and a
  finished response leaves it at once (requests with other sampling settings wait their turn).
* ``HFRolloutServer.update_weights(named_tensors)``: the actor pushes its weights every step
  (see ``adapter.HFServerAdapter``).
* sleep/wake-up/kv-cache/abort/profile calls are no-ops: there is no GPU memory to release.

All of the server's torch work (loading, prefill, decode steps, weight copies) runs on one
dedicated thread (``_torch_thread``), never on the event loop's thread or asyncio's default
pool. torch's OpenMP keeps one team of worker threads per calling thread: a second thread that
runs any parallel op (a weight ``copy_`` on the event loop, a decode step on another pool thread)
leaves a second team on the same 2 cores, and decoding then took 13.9 s instead of 10.2 s for the
same 16 x 128 tokens (SmolLM2-135M, measured standalone; 17-18 s inside the trainer).

``HFReplica`` is the ``RolloutReplica`` that launches one server per replica, registered as
rollout ``hf``.

The server runs where verl's platform runs the workers (:func:`server_placement`): on CPU, or on
the GPU of the replica's first worker, in ``rollout.dtype`` (bf16 for the GPU configs), so COPO
trains end to end on one GPU without vLLM (``actor_rollout_ref.rollout.name=hf``; see
``rollout_registry.py``). vLLM stays the rollout of the paper runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import ray
import torch
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from .sampling import DecodeBatch, SamplingParams
from .weight_wire import unpack

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

SERVER_NAME_PREFIX = "hf_"
# How long the first request of an idle server waits for its batch-mates before decoding starts;
# later requests join the running batch (continuous batching), so this only saves prefill calls.
GATHER_S = 0.02
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


@dataclass(frozen=True)
class Placement:
    """Where a replica's server computes: the torch device and the env vars of its Ray actor."""

    device: str
    env_vars: dict[str, str] = field(default_factory=dict)


def server_placement(platform_device: str, accelerator_id: str | None = None) -> Placement:
    """The server's device for verl's platform device (``cpu`` or ``cuda``).

    On CUDA the server shares the GPU of the replica's first worker, as verl's vLLM server does
    (vllm_async_server.py): Ray would hide every GPU from an actor that reserves none, so the
    actor is told not to touch ``CUDA_VISIBLE_DEVICES`` and gets the worker's device id instead.

    Args:
        platform_device: ``verl.utils.device.get_device_name()`` where the replica is built.
        accelerator_id: the first worker's GPU id (``ray.get_runtime_context().get_accelerator_ids()``).
    """
    if platform_device == "cpu":
        return Placement("cpu")
    if platform_device != "cuda":
        raise NotImplementedError(f"the hf rollout runs on cpu or cuda, not on {platform_device!r}")
    if accelerator_id is None:
        raise ValueError("the hf rollout on cuda needs the GPU id of the replica's first worker")
    return Placement(
        "cuda",
        {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": str(accelerator_id)},
    )


def server_actor_name(replica_rank: int, node_rank: int = 0, suffix: str = "") -> str:
    """Ray actor name of a replica's server; the worker-side adapter looks it up by this name."""
    return f"{SERVER_NAME_PREFIX}server_{replica_rank}_{node_rank}{suffix}"


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    future: asyncio.Future = field(repr=False)


class HFRolloutServer:
    """Token-in/token-out generation with a transformers model (one CPU process).

    Args:
        config: verl ``RolloutConfig`` (dataclass or DictConfig): prompt/response length, dtype,
            seed, max_num_seqs, ignore_eos.
        model_config: verl ``HFModelConfig`` or its DictConfig (``path``/``local_path``).
        replica_rank: rank of the replica this server belongs to.
        device: ``cpu`` or ``cuda`` (:func:`server_placement`).
    """

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0, device: str = "cpu") -> None:
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig, RolloutConfig

        self.config = omega_conf_to_dataclass(config, dataclass_type=RolloutConfig)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        self.device = device
        self.global_steps: int | None = None
        self.model: torch.nn.Module | None = None
        self._pending: list[_Request] = []
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._model_lock: asyncio.Lock | None = None
        # occurrences of each prompt since the last weight update: with the seed, they fix each
        # request's RNG stream (see _request_seed)
        self._prompt_counts: dict[int, int] = {}
        self._weight_version = 0
        self._stats = {"requests": 0, "batches": 0, "prefills": 0, "max_batch": 0, "weight_updates": 0}
        self._torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-rollout-torch")

    async def _on_torch_thread(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the server's one torch thread (see the module docstring)."""
        return await asyncio.get_running_loop().run_in_executor(self._torch_thread, fn, *args)

    # -- lifecycle ---------------------------------------------------------------------------
    async def launch_server(self) -> None:
        """Load the model (from the local path, in ``rollout.dtype``, on ``device``) and start the
        batching loop."""
        from transformers import AutoModelForCausalLM

        dtype_name = str(self.config.dtype)
        if dtype_name not in _DTYPES:
            raise ValueError(
                f"actor_rollout_ref.rollout.dtype={dtype_name!r} is not supported by the hf rollout; "
                f"use one of {sorted(_DTYPES)}"
            )
        path = self.model_config.local_path or self.model_config.path

        def load() -> torch.nn.Module:
            from . import attention
            from .settings import worker_threads

            attention.register()  # also where install() did not run in this process
            if self.device == "cpu":
                torch.set_num_threads(worker_threads()[0])  # OpenMP's thread count is per calling thread
            model = AutoModelForCausalLM.from_pretrained(
                path,
                dtype=_DTYPES[dtype_name],
                attn_implementation=self.attn_implementation(),
                trust_remote_code=self.model_config.trust_remote_code,
            )
            return model.to(self.device).eval()

        self.model = await self._on_torch_thread(load)
        tokenizer = self.model_config.tokenizer
        eos: set[int] = set()
        if tokenizer is not None and tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        gen_eos = getattr(self.model_config.generation_config, "eos_token_id", None)
        if gen_eos is not None:
            eos.update(int(e) for e in (gen_eos if isinstance(gen_eos, list | tuple) else [gen_eos]))
        if not eos:
            raise ValueError(f"model at {path} defines no eos token (tokenizer or generation_config)")
        self.eos_token_ids = sorted(eos)
        pad = tokenizer.pad_token_id if tokenizer is not None else None
        self.pad_token_id = int(pad if pad is not None else self.eos_token_ids[0])
        self._max_model_len = int(
            self.config.max_model_len or (self.config.prompt_length + self.config.response_length)
        )
        self._wake = asyncio.Event()
        self._model_lock = asyncio.Lock()
        self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())
        logger.info(
            "hf rollout server %d ready: %s (%s on %s), eos=%s",
            self.replica_rank,
            path,
            dtype_name,
            self.device,
            eos,
        )

    def attn_implementation(self) -> str:
        """The actor's attention (``model.override_config.attn_implementation``), so that the rollout's
        log-probs and the actor's come from the same kernel; when none is set, ``sdpa_gqa`` on CPU
        (tuned for CPU decoding) and ``sdpa`` on a GPU."""
        from .attention import ATTN_IMPLEMENTATION

        override = getattr(self.model_config, "override_config", None) or {}
        default = ATTN_IMPLEMENTATION if self.device == "cpu" else "sdpa"
        return str(override.get("attn_implementation") or default)

    def get_server_address(self) -> str:
        return f"hf-rollout-{self.replica_rank}"

    # -- generation ------------------------------------------------------------------------
    def _params(self, prompt_len: int, sampling_params: dict[str, Any]) -> SamplingParams:
        budget = self._max_model_len - prompt_len
        if budget < 1:
            raise ValueError(
                f"prompt of {prompt_len} tokens leaves no room to generate within "
                f"max_model_len={self._max_model_len}; raise actor_rollout_ref.rollout.prompt_length/"
                "response_length or data.max_prompt_length"
            )
        max_tokens = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
        if max_tokens is None:
            max_tokens = min(
                self.config.response_length,
                self.config.prompt_length + self.config.response_length - prompt_len,
            )
        top_k = sampling_params.get("top_k", -1)
        return SamplingParams(
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            top_k=int(top_k if top_k is not None else -1),
            max_tokens=max(1, min(int(max_tokens), budget)),
            ignore_eos=bool(sampling_params.get("ignore_eos", self.config.ignore_eos)),
        )

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> TokenOutput:
        """Generate one response (the signature of verl's vLLM server ``generate``)."""
        if image_data is not None or video_data is not None or audio_data is not None:
            raise NotImplementedError("the hf rollout serves text-only models")
        if self.model is None:
            raise RuntimeError("generate() called before launch_server()")
        prompt_ids = [int(t) for t in prompt_ids]
        params = self._params(len(prompt_ids), dict(sampling_params))
        seed = sampling_params.get("seed")
        seed = self._request_seed(prompt_ids) if seed is None else int(seed)
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(prompt_ids, params, seed, future))
        self._wake.set()
        token_ids, log_probs = await future
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    def _request_seed(self, prompt_ids: list[int]) -> int:
        """Seed of one request from (rollout.seed, replica, training step, prompt, occurrence).

        The agent loop sends a group's n copies of a prompt concurrently in no fixed order; a
        seed that depends on the prompt and on how many copies came before (not on arrival order
        among different prompts or on batching) makes each step's set of responses reproducible
        across runs with the same seed.
        """
        key = hash(tuple(prompt_ids))
        occurrence = self._prompt_counts.get(key, 0)
        self._prompt_counts[key] = occurrence + 1
        # the training step (not a local counter) so a resumed run samples as the original did
        step = self.global_steps if self.global_steps is not None else -self._weight_version
        parts = (int(self.config.seed), self.replica_rank, step, occurrence, *prompt_ids)
        digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF

    async def _batch_loop(self) -> None:
        """Continuous batching: decode one step at a time, admitting waiting requests between steps.

        A request that arrives while others decode joins the running batch at the next step (see
        ``sampling.DecodeBatch``) instead of waiting for the whole batch, and a finished response
        is returned at once. The agent loop sends a step's requests over tens to hundreds of
        milliseconds (TransferQueue round trips, tokenization), so a fixed gather window split them
        into several full-length decodes; now late requests only cost their own prefill.
        """
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            # Requests sent together (a group, a batch) prefill together instead of one by one.
            await asyncio.sleep(GATHER_S)
            if not self._pending:
                continue
            first = self._pending[0].params
            async with self._model_lock:
                await self._decode(first)

    def _admit(self, key: tuple, room: int) -> list[_Request]:
        """Take up to ``room`` waiting requests with sampling key ``key`` (others keep waiting)."""
        taken: list[_Request] = []
        kept: list[_Request] = []
        for req in self._pending:
            if len(taken) < room and req.params.group_key() == key and not req.future.done():
                taken.append(req)
            elif not req.future.done():
                kept.append(req)
        self._pending = kept
        return taken

    async def _decode(self, params: SamplingParams) -> None:
        """Run one DecodeBatch until no row is left and no compatible request waits."""
        key = params.group_key()
        limit = max(1, int(self.config.max_num_seqs))
        decode = DecodeBatch(
            self.model, params, eos_token_ids=self.eos_token_ids, pad_token_id=self.pad_token_id
        )
        live: list[_Request] = []
        self._stats["batches"] += 1
        try:
            while True:
                admitted = self._admit(key, limit - len(decode))
                if admitted:
                    self._stats["requests"] += len(admitted)
                    self._stats["prefills"] += 1
                    live.extend(admitted)
                    await self._on_torch_thread(
                        decode.add,
                        [r.prompt_ids for r in admitted],
                        [r.params.max_tokens for r in admitted],
                        [torch.Generator().manual_seed(r.seed) for r in admitted],
                        admitted,
                    )
                    self._stats["max_batch"] = max(self._stats["max_batch"], len(decode))
                if not len(decode):
                    return
                for req, sample in await self._on_torch_thread(decode.step):
                    live.remove(req)
                    if not req.future.done():
                        req.future.set_result((sample.token_ids, sample.log_probs))
        except Exception as exc:  # fail the requests of this batch, keep the server alive
            for req in live:
                if not req.future.done():
                    req.future.set_exception(exc)

    # -- weights ---------------------------------------------------------------------------
    async def update_weights(
        self,
        named_tensors: dict[str, torch.Tensor | np.ndarray],
        global_steps: int | None = None,
        last: bool = True,
    ) -> int:
        """Load (part of) the actor's HF-keyed weights; returns how many tensors were loaded.

        Values are tensors or numpy arrays (``weight_wire.pack``: how the adapter sends them).

        The adapter streams the weights in buckets; ``last`` marks the final one, after which the
        new weight version takes effect for request seeding.

        Raises KeyError naming the first weight this model does not have, so a key-mapping
        mismatch fails the step instead of silently sampling from stale weights.
        """
        async with self._model_lock:
            # state_dict keeps both names of tied weights (lm_head.weight / embed_tokens.weight)
            params = self.model.state_dict(keep_vars=True)
            unknown = [k for k in named_tensors if k not in params]
            if unknown:
                raise KeyError(f"hf rollout: actor weight {unknown[0]!r} has no match in the rollout model")

            @torch.no_grad()
            def copy_in() -> None:
                for name, tensor in named_tensors.items():
                    params[name].copy_(unpack(tensor).to(params[name].dtype))

            await self._on_torch_thread(copy_in)
            if global_steps is not None:
                self.global_steps = global_steps
            if last:
                self._weight_version += 1
                self._stats["weight_updates"] += 1
                self._prompt_counts.clear()
        return len(named_tensors)

    def get_stats(self) -> dict[str, int]:
        """Counters: requests admitted, decode batches run (each until it drained), prefill calls,
        most rows decoded together, weight updates."""
        return dict(self._stats)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # -- no-ops: nothing to offload on CPU -------------------------------------------------------
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """One ``HFRolloutServer`` per replica, on the node of the replica's first worker."""

    async def launch_servers(self) -> None:
        if self.nnodes != 1:
            raise NotImplementedError(
                "the hf rollout runs one server per replica on one node; set "
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1 (and data/pipeline parallel 1)"
            )
        from verl.utils.device import get_device_name, get_resource_name

        node_id = accelerator_id = None
        if self.workers:
            resource = get_resource_name()
            node_id, accelerator_id = await self.workers[0].__ray_call__.remote(
                lambda self: (
                    ray.get_runtime_context().get_node_id(),
                    (ray.get_runtime_context().get_accelerator_ids().get(resource) or [None])[0],
                )
            )
        placement = server_placement(get_device_name(), accelerator_id)
        options: dict[str, Any] = {
            "name": server_actor_name(self.replica_rank, 0, self.name_suffix),
            "max_concurrency": self.max_concurrency,
            # The server computes while the colocated trainer waits, so it claims no CPU slot
            # of its own (the logical CPUs are all taken by verl's placement bundles), and on a
            # GPU it shares the first worker's (colocated, as verl's vLLM servers are).
            "num_cpus": 0,
        }
        if placement.env_vars:
            options["runtime_env"] = {"env_vars": placement.env_vars}
        if node_id is not None:
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            )
        server = (
            ray.remote(HFRolloutServer)
            .options(**options)
            .remote(
                config=self.config,
                model_config=self.model_config,
                replica_rank=self.replica_rank,
                device=placement.device,
            )
        )
        await server.launch_server.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = await server.get_server_address.remote()
