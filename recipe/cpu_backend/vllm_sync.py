"""verl's vLLM rollout with a weight sync that fails instead of hanging (``actor_rollout_ref.rollout.name=vllm``
on CPU; registered by ``rollout_registry.register_vllm``, imported only by the worker that builds the rollout).

Why. Each sync, verl's ``ServerAdapter.update_weights`` (verl/workers/rollout/vllm_rollout/vllm_rollout.py,
in the trainer's actor worker) starts the receiver in the vLLM workers (``collective_rpc
update_weights_from_ipc``, not awaited yet) and then sends buckets of weights over a ZeroMQ REQ socket,
waiting after each in a blocking ``socket.recv()`` for the receiver's acknowledgement
(bucketed_weight_transfer.py). When the receiver fails (vLLM's ``load_weights`` raises: on CPU without
this project's vLLM plugin, ``'Parameter' object has no attribute 'weight_loader'``), it closes its socket
without acknowledging, its error waits in the RPC's result that verl only awaits after the send, and the
sender waits forever: the trainer hung (9 minutes before it was killed, issue 36) holding its
``/dev/shm/verl_weights_*`` bucket, which only the sender's ``finally`` unlinks.

What. :class:`WatchedServerAdapter` records the receiver's RPC result, and the sender of its module
(:class:`WatchedSender`) waits for each acknowledgement in short polls, between which it asks Ray whether
that RPC has ended. An RPC that ended with an error will never acknowledge: the sender raises
:class:`VllmWeightSyncError` with the receiver's error (one that ended well acknowledged before it returned:
the sender then waits for that reply as verl does), its ``finally`` closes the socket and unlinks the
segment, and the error ends the run like any other in the trainer. Nothing is timed: the run ends when the
receiver's failure reaches Ray, however slow the machine.

When it can go: when verl's sender stops waiting on a receiver that has failed (or awaits the RPC
alongside the send).
"""

from __future__ import annotations

from typing import Any

import ray
import zmq
from verl.workers.rollout.vllm_rollout import vllm_rollout
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender

RECEIVER_METHOD = "update_weights_from_ipc"
POLL_MS = 200  # between two looks at the receiver's RPC; a sync of a CPU-sized model takes ~1 s

# The receiver RPC of each sync in flight, by the sender's ZeroMQ address (ServerAdapter.zmq_handle).
_receivers: dict[str, Any] = {}


class VllmWeightSyncError(RuntimeError):
    """The vLLM rollout's weight sync failed in the vLLM server: the run cannot go on."""


def _receiver_ended(handle: str) -> tuple[bool, BaseException | None]:
    """(whether the receiver RPC of the sync on ``handle`` has ended, the error it ended with)."""
    ref = _receivers.get(handle)
    if ref is None or not ray.wait([ref], timeout=0)[0]:
        return False, None
    try:
        ray.get(ref)
    except Exception as exc:  # the receiver's own error, as Ray carries it
        return True, exc
    return True, None


def sync_error(cause: BaseException) -> VllmWeightSyncError:
    """The run's error: what failed, where to look, and the server's error (the last line Ray carries)."""
    lines = [line for line in str(cause).splitlines() if line.strip()]
    return VllmWeightSyncError(
        "vLLM rollout (actor_rollout_ref.rollout.name=vllm): the weight sync from the actor into the vLLM "
        "server failed in the server (its receiver, update_weights_from_ipc, ended without acknowledging the "
        "weights), so the run stops. The vLLM workers' traceback above names the cause. On CPU, check that "
        "vLLM loads this project's plugin (entry point copo_keep_linear_weights, installed into .venv-vllm by "
        "scripts/setup_vllm_cpu.sh; VLLM_PLUGINS, when set, must list it) and that the actor's model is the "
        "one vLLM serves (actor_rollout_ref.model.path, model.override_config). The server's error: "
        + (lines[-1] if lines else type(cause).__name__)
    )


class _WatchedSocket:
    """The sender's REQ socket, whose ``recv`` gives up when the receiver's RPC has ended."""

    def __init__(self, socket: zmq.Socket, handle: str) -> None:
        self._socket = socket
        self._handle = handle

    def recv(self, *args: Any, **kwargs: Any) -> Any:
        while not self._socket.poll(POLL_MS, zmq.POLLIN):
            ended, cause = _receiver_ended(self._handle)
            if cause is not None:
                self._socket.setsockopt(zmq.LINGER, 0)  # nothing still queued may hold the process
                raise sync_error(cause) from cause
            if ended:  # a receiver that ended well sent its last acknowledgement first: it is on its way
                break
        return self._socket.recv(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._socket, name)


class WatchedSender(BucketedWeightSender):
    """verl's sender, whose waits for an acknowledgement end when the receiver has failed."""

    def _init_socket(self) -> None:
        super()._init_socket()
        self.socket = _WatchedSocket(self.socket, self.zmq_handle)


class WatchedServerAdapter(vllm_rollout.ServerAdapter):
    """verl's vLLM ServerAdapter, recording each sync's receiver RPC for :class:`WatchedSender`."""

    async def _execute_method(self, method: str, non_block: bool = False, *args: Any, **kwargs: Any) -> Any:
        result = await super()._execute_method(method, non_block, *args, **kwargs)
        if method == RECEIVER_METHOD and non_block and result is not None:
            _receivers[self.zmq_handle] = result
        return result

    async def update_weights(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().update_weights(*args, **kwargs)
        finally:
            _receivers.pop(self.zmq_handle, None)


# ServerAdapter.update_weights builds its sender from this module-level name.
vllm_rollout.BucketedWeightSender = WatchedSender
