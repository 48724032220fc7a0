"""A run that stops because one of its processes died says which one, and how to continue.

When a Ray actor of the run dies (killed, out of memory, a crashed library), verl's trainer sees Ray's
``ActorDiedError`` in the middle of its loop; what reaches the user is a long traceback whose one useful
line is ``class_name: HFRolloutServer``. :func:`worker_death_message` turns that error into one paragraph:
the component in words, its pid, the likely causes and where the logs are, and the command that
continues the run from its last complete checkpoint (``recipe/copo/checkpoint_guard.py``).
"""

from __future__ import annotations

import re
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
    how = "Relaunch the same command" if mode == "auto" else "Relaunch the same command with trainer.resume_mode=auto"
    return f"{how}: the run continues {where}."


def worker_death_message(exc: BaseException, config: Any) -> str | None:
    """One paragraph for a run stopped by a dead Ray actor; None when ``exc`` is something else."""
    died = _actor_died(exc)
    if died is None:
        return None
    text = str(died)
    fields = dict(_FIELD.findall(text))
    # verl's colocated workers are classes made at run time: "create_colocated_worker_cls.<locals>.WorkerDict"
    cls = fields.get("class_name", "an unknown Ray actor").rsplit(".", 1)[-1]
    what = COMPONENTS.get(cls, f"a worker of class {cls}")
    exit_type = _EXIT.search(text)
    pid = f", pid {fields['pid']}" if "pid" in fields else ""
    cause = f" (Ray: worker exit type {exit_type.group(1)})" if exit_type else ""
    return (
        f"The training run stopped because {what} died{cause}: Ray actor {cls}{pid}. Common causes: the process "
        "was killed (kill -9, the out-of-memory killer: see `dmesg`), or a crash in a library it runs; its log "
        f"is in Ray's session folder (by default /tmp/ray/session_latest/logs, worker-*.err). {_resume_hint(config)}"
    )
