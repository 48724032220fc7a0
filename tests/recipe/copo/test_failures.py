"""A run stopped by a dead Ray actor names it and the relaunch (recipe/copo/failures.py); the real kills
are in tests/faults/test_worker_faults.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from ray.exceptions import RayActorError

from recipe.copo.checkpoint_guard import MARKER
from recipe.copo.failures import DeadActor, worker_death_message
from tests.paths import REPO

# What Ray 2.60 prints for an actor whose process was killed (its fields, one per line).
RAY_TEXT = """The actor died unexpectedly before finishing this task.
\tclass_name: {cls}
\tactor_id: 97b29f16470b9c1b3934e96401000000
\tpid: 16179
\tname: hf_server_0_0
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: ..."""


class Died(RayActorError):
    def __init__(self, cls: str) -> None:
        super().__init__()
        self.text = RAY_TEXT.format(cls=cls)

    def __str__(self) -> str:
        return self.text


class TaskError(Exception):
    """Ray's RayTaskError keeps the worker's exception as ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("ray::CopoTaskRunner.run() failed")
        self.cause = cause


def config(root: Path, resume_mode: str = "auto"):
    return OmegaConf.create(
        {"trainer": {"default_local_dir": str(root), "save_freq": 1, "resume_mode": resume_mode}}
    )


@pytest.mark.parametrize(
    ("cls", "words"),
    [
        ("HFRolloutServer", "the rollout server"),
        ("create_colocated_worker_cls.<locals>.WorkerDict", "an actor/reference training worker"),
        ("RewardLoopWorker", "a reward worker"),
        ("SomethingNew", "a worker of class SomethingNew"),
    ],
)
def test_the_message_names_the_component_its_pid_and_the_resume_point(
    tmp_path: Path, cls: str, words: str
) -> None:
    (tmp_path / "global_step_3").mkdir()
    (tmp_path / "global_step_3" / MARKER).write_text("{}")
    message = worker_death_message(TaskError(Died(cls)), config(tmp_path))
    short = cls.rsplit(".", 1)[-1]
    assert message.startswith(f"The training run stopped because {words}")
    assert "died (Ray: worker exit type SYSTEM_ERROR)" in message
    assert f"Ray actor {short}, pid 16179" in message
    assert (
        f"Relaunch the same command: the run continues from its last complete checkpoint, {tmp_path}/global_step_3 (step 3)"
        in message
    )


def test_without_a_checkpoint_or_auto_resume_the_message_says_so(tmp_path: Path) -> None:
    message = worker_death_message(Died("RewardLoopWorker"), config(tmp_path, resume_mode="disable"))
    assert "Relaunch the same command with trainer.resume_mode=auto" in message
    assert f"from step 0 (no complete checkpoint in {tmp_path} yet; trainer.save_freq=1)" in message


def test_other_errors_are_left_alone(tmp_path: Path) -> None:
    assert worker_death_message(RuntimeError("CUDA out of memory"), config(tmp_path), dead=lambda: []) is None


def test_a_death_that_reached_the_trainer_as_another_error_is_still_named(tmp_path: Path) -> None:
    # A killed reward worker: the agent loop marks its samples failed, verl then fails on the empty batch.
    error = RuntimeError("Sync replay buffer selected terminal groups with no materializable trajectories.")
    message = worker_death_message(
        error, config(tmp_path), dead=lambda: [DeadActor("RewardLoopWorker", 6013, "WORKER_DIED")]
    )
    assert message.startswith("The training run stopped because a reward worker")
    assert "died (Ray: WORKER_DIED): Ray actor RewardLoopWorker, pid 6013" in message
    assert message.endswith(f"The trainer then failed with RuntimeError: {error}")


DEAD_ACTORS_SCRIPT = """
import os, sys, time
import ray
from recipe.copo.failures import dead_actors
ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])

@ray.remote
class Victim:
    def pid(self):
        return os.getpid()

@ray.remote
class Retired:
    def pid(self):
        return os.getpid()

victim, retired = Victim.remote(), Retired.remote()
pid = ray.get(victim.pid.remote())
ray.get(retired.pid.remote())
os.kill(pid, 9)
ray.kill(retired)  # asked for: not a fault
deadline = time.time() + 60
while not (found := dead_actors()) and time.time() < deadline:
    time.sleep(0.5)
print("DEAD", [(a.class_name, a.pid == pid, a.reason) for a in found])
ray.shutdown()
"""


def test_dead_actors_reads_ray_for_unexpected_deaths_only(tmp_path: Path) -> None:
    temp = Path(f"/tmp/rd{os.getpid()}")  # Ray's socket paths must stay short
    try:
        proc = subprocess.run(
            [sys.executable, "-c", DEAD_ACTORS_SCRIPT, str(temp)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"},
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DEAD [('Victim', True, 'WORKER_DIED')]" in proc.stdout, proc.stdout[-2000:]
