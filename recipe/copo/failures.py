"""A run that stops because one of its processes died says which one, and how to continue.

When a Ray actor of the run dies (killed, out of memory, a crashed library), verl's trainer sees Ray's
``ActorDiedError`` in the middle of its loop; what reaches the user is a long traceback whose one useful
line is ``class_name: HFRolloutServer``. :func:`worker_death_message` turns that error into one paragraph:
the component in words, its pid, the likely causes and where the logs are, and the command that
continues the run from its last complete checkpoint (``recipe/copo/checkpoint_guard.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe.copo.checkpoint_guard import complete_steps

# Ray actor class -> what it is, in the words of a user who launched a training run.
COMPONENTS = {
    "WorkerDict": "an actor/reference training worker (the FSDP model: log-probs, backward, optimizer)",
    "ActorRolloutRefWorker": "an actor/reference training worker (the FSDP model: log-probs, backward, optimizer)",
    "HFRolloutServer": "the rollout server (generation, recipe/cpu_backend/hf_server.py)",
    "vLLMHttpServer": "a vLLM rollout server (generation)",
    "SGLangHttpServer": "an SGLang rollout server (generation)",
    "RewardLoopWorker": "a reward worker (scores the responses)",
    "AgentLoopWorker": "an agent-loop worker (drives the rollout)",
    "CopoTaskRunner": "the trainer (the driver loop)",
    "TransferQueueController": "the TransferQueue controller (the step's data store)",
    "SimpleStorageUnit": "a TransferQueue storage unit (the step's data store)",
}
_FIELD = re.compile(r"^\s*(class_name|pid|name):\s*(\S+)", re.MULTILINE)
_EXIT = re.compile(r"Worker exit type: (\w+)")


class WorkerDiedError(RuntimeError):
    """A process of the run died; the message names it and says how to continue."""


def _actor_died(exc: BaseException) -> BaseException | None:
    """The first ``ActorDiedError``/``RayActorError`` in ``exc``'s chain (Ray wraps it in RayTaskError)."""
    from ray.exceptions import RayActorError

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, RayActorError):
            return current
        todo += [getattr(current, "cause", None), current.__cause__, current.__context__]
    return None


def _resume_hint(config: Any) -> str:
    trainer = config.trainer
    root = Path(str(trainer.default_local_dir)).absolute()
    steps = complete_steps(root)
    where = (
        f"from its last complete checkpoint, {root / f'global_step_{steps[-1]}'} (step {steps[-1]})"
        if steps
        else f"from step 0 (no complete checkpoint in {root} yet; trainer.save_freq={trainer.save_freq})"
    )
    mode = trainer.get("resume_mode", "auto")
    how = (
        "Relaunch the same command"
        if mode == "auto"
        else "Relaunch the same command with trainer.resume_mode=auto"
    )
    return f"{how}: the run continues {where}."


@dataclass(frozen=True)
class DeadActor:
    """An actor of the run that died without being asked to (Ray's death reason, e.g. WORKER_DIED)."""

    class_name: str
    pid: int | None
    reason: str


# Ray's reasons for a death nobody asked for (ray.kill and an owner's exit are asked for).
_UNEXPECTED = ("WORKER_DIED", "OUT_OF_MEMORY", "NODE_DIED")


def dead_actors() -> list[DeadActor]:
    """The actors of this Ray cluster that died unexpectedly (from the GCS; empty when Ray is not up).

    A worker's death does not always reach the trainer as Ray's ``ActorDiedError``: an agent-loop worker
    that loses its reward worker marks the samples failed, and the trainer then fails on the empty batch.
    """
    import ray

    if not ray.is_initialized():
        return []
    try:
        table = ray._private.state.actors()  # the GCS actor table; no dashboard needed
    except Exception:  # the cluster is going away: nothing to add
        return []
    found = []
    for actor in table.values():
        reason = re.search(r"reason: (\w+)", str(actor.get("DeathCause") or ""))
        if actor.get("State") == "DEAD" and reason and reason.group(1) in _UNEXPECTED:
            found.append(DeadActor(str(actor.get("ActorClassName", "?")), actor.get("Pid"), reason.group(1)))
    return found


def worker_death_message(
    exc: BaseException, config: Any, dead: Callable[[], list[DeadActor]] = dead_actors
) -> str | None:
    """One paragraph for a run stopped by a dead Ray actor; None when no actor of the run died.

    The dead actor is the one in ``exc``'s chain (Ray's ``ActorDiedError``), else the first one ``dead()``
    reports (and the error the trainer raised after it is named as what followed).
    """
    died = _actor_died(exc)
    followed = ""
    if died is not None:
        text = str(died)
        fields = dict(_FIELD.findall(text))
        exit_type = _EXIT.search(text)
        cause = f" (Ray: worker exit type {exit_type.group(1)})" if exit_type else ""
    else:
        actors = dead()
        if not actors:
            return None
        fields = {"class_name": actors[0].class_name}
        if actors[0].pid:
            fields["pid"] = str(actors[0].pid)
        cause = f" (Ray: {actors[0].reason})"
        last_line = (str(exc).strip().splitlines() or [""])[-1][:300]
        followed = f" The trainer then failed with {type(exc).__name__}: {last_line}"
    # verl's colocated workers are classes made at run time: "create_colocated_worker_cls.<locals>.WorkerDict"
    cls = fields.get("class_name", "an unknown Ray actor").rsplit(".", 1)[-1]
    what = COMPONENTS.get(cls, f"a worker of class {cls}")
    pid = f", pid {fields['pid']}" if "pid" in fields else ""
    return (
        f"The training run stopped because {what} died{cause}: Ray actor {cls}{pid}. Common causes: the process "
        "was killed (kill -9, the out-of-memory killer: see `dmesg`), or a crash in a library it runs; its log "
        f"is in Ray's session folder (by default /tmp/ray/session_latest/logs, worker-*.err). {_resume_hint(config)}"
        f"{followed}"
    )
