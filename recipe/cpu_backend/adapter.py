"""Worker-side half of the hf rollout: pushes the actor's weights to the replica's server.

verl's ``ActorRolloutRefWorker`` (verl/workers/engine_workers.py:667) builds its rollout with
``get_rollout_class(name, mode)`` and, every step, calls ``rollout.update_weights(...)`` with the
FSDP engine's ``(name, full tensor)`` generator (engine_workers.py:800-806, naive checkpoint
backend). This adapter is that rollout object for ``name == "hf"``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout

from .hf_server import server_actor_name
from .weight_wire import pack

BUCKET_BYTES = 64 << 20
# Buckets sent before waiting for the server to load the oldest: the next bucket is gathered while
# the server copies the last one in; more in flight would only hold more of the model in the store.
BUCKETS_IN_FLIGHT = 2


class HFServerAdapter(BaseRollout):
    """Client of the replica's ``HFRolloutServer``: weight updates; memory calls are no-ops."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        rollout_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // rollout_world_size if replica_rank == -1 else replica_rank
        # Only the replica's first rank talks to the server; every rank still walks the weight
        # generator because gathering an FSDP shard into a full tensor is a collective.
        self._has_server = rank % rollout_world_size == 0
        self._server: ray.actor.ActorHandle | None = None
        self.sleep_level = 1

    def _server_handle(self) -> ray.actor.ActorHandle:
        # Resolved lazily: the server is launched after the worker's engine is built.
        if self._server is None:
            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(
                f"hf rollout receives full named tensors only, got wire_format={wire_format!r}; "
                "use actor_rollout_ref.rollout.checkpoint_engine.backend=naive"
            )
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError(
                "hf rollout cannot load a LoRA adapter; set actor_rollout_ref.model.lora.merge=True"
            )
        # Stream in buckets (as numpy views: weight_wire): one dict of every weight would put the
        # whole model in the object store at once.
        global_steps = kwargs.get("global_steps")
        pending: list[ray.ObjectRef] = []
        bucket: dict[str, Any] = {}
        size = 0
        for name, tensor in weights:
            if not self._has_server:
                continue
            bucket[name] = pack(tensor)
            size += tensor.numel() * tensor.element_size()
            if size >= BUCKET_BYTES:
                pending.append(
                    self._server_handle().update_weights.remote(bucket, global_steps=global_steps, last=False)
                )
                bucket, size = {}, 0
                if len(pending) >= BUCKETS_IN_FLIGHT:
                    await pending.pop(0)
        if self._has_server:
            # Ray may start an async actor's calls out of order; the buckets hold disjoint weights and
            # this returns only once all are loaded, so the server has the new weights before any rollout.
            pending.append(
                self._server_handle().update_weights.remote(bucket, global_steps=global_steps, last=True)
            )
            for ref in pending:
                await ref
