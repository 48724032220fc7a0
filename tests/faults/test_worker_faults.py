"""A worker dies mid-step (issue item 2): the rollout server, an actor worker, a reward worker.

One timeline: the run is started, a step is under way, one component is killed with SIGKILL (as the
out-of-memory killer does); the run must stop within 60 s with an error naming the dead component and
the relaunch that continues it, and leave no process behind. The relaunch is then the next leg: it must
resume from the last complete checkpoint and train the next step on the prompts the uninterrupted run
trained, and the next component is killed in it. The last relaunch trains to the end.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from recipe.copo.checkpoint_guard import read_tracker
from tests.faults.conftest import REFERENCE_STEPS
from tests.faults.harness import RUN_TIMEOUT_S, Launched, batch, logged_steps, run_to_end, tiny_run
from tests.faults.records import record

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.timeout(5 * RUN_TIMEOUT_S)]

STOP_LIMIT_S = 60.0  # the bound: a dead worker stops the run within a minute, no hang
# (Ray actor class, the words the error must use, how far into a step it is killed)
VICTIMS = [
    ("HFRolloutServer", "the rollout server", 0.3),
    ("WorkerDict", "an actor/reference training worker", 2.0),
    ("RewardLoopWorker", "a reward worker", 0.5),
]
RECORD_KEYS = [f"2{'abc'[i]}-dead-{cls.lower()}" for i, (cls, _, _) in enumerate(VICTIMS)]


def test_a_dead_worker_stops_the_run_with_its_name_and_the_relaunch_resumes(
    tmp_path: Path, fault_inputs, reference_run
) -> None:
    run = tiny_run(tmp_path / "run", fault_inputs)
    pending: dict | None = None  # the previous fault's record, completed once its relaunch resumed
    for leg, (actor_class, words, delay_s) in enumerate(VICTIMS):
        resume_from = read_tracker(run.ckpt)
        launched = Launched(run.command(40), tmp_path / f"leg{leg}.log")
        try:
            target = (max(logged_steps(run.metrics)) if logged_steps(run.metrics) else 0) + 1
            launched.wait_for(lambda t=target: t in logged_steps(run.metrics), f"step {target}")
            if pending is not None:
                pending["resumed_same_next_step"] = batch(run.dumps, target) == batch(
                    reference_run.dumps, target
                )
                assert f"resuming from {run.ckpt}/global_step_{resume_from}" in launched.text()
                assert logged_steps(run.metrics) == list(range(1, target + 1))
                assert pending["resumed_same_next_step"], (
                    f"step {target} trained other prompts after the resume"
                )
                record(**pending)
            time.sleep(delay_s)  # into the next step: generation, then the update
            victims = launched.pids_of(f"ray::{actor_class}")
            assert victims, f"no {actor_class} in the run: {launched.processes()}"
            before = logged_steps(run.metrics)
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            os.kill(victims[0], signal.SIGKILL)
            stop_s, left = launched.stopped_after(t0, timeout=STOP_LIMIT_S)
        finally:
            launched.cleanup()
        text = launched.text()
        assert not left, f"{actor_class} killed: not stopped within {STOP_LIMIT_S:.0f} s, still alive: {left}"
        assert launched.proc.returncode not in (0, None)
        assert f"The training run stopped because {words}" in text and f"Ray actor {actor_class}" in text, (
            text[-6000:]
        )
        saved = read_tracker(run.ckpt)
        assert "Relaunch the same command" in text and f"global_step_{saved}" in text, text[-3000:]
        # a step may finish between the kill and the moment its death is felt: count from the metrics now
        pending = {
            "key": RECORD_KEYS[leg],
            "fault": f"{words} dies mid-step",
            "injection": f"SIGKILL to ray::{actor_class} {delay_s:.1f} s after step {max(before)} was logged",
            "stop_s": stop_s,
            "steps_lost": max(logged_steps(run.metrics)) - saved,
            "processes_left": len(left),
            "resumed_same_next_step": None,
            "note": "the error names the component and the relaunch; the relaunch resumed",
            "load_1min": load,
        }
    # the last relaunch: resumes and trains the next step, then ends
    saved = read_tracker(run.ckpt)
    assert saved is not None and saved < REFERENCE_STEPS, f"step {saved} saved: past the reference run"
    final = run_to_end(run.command(saved + 1), tmp_path / "final.log")
    assert final.rc == 0 and not final.left, final.log[-6000:]
    assert f"resuming from {run.ckpt}/global_step_{saved}" in final.log
    assert logged_steps(run.metrics) == list(range(1, saved + 2))
    pending["resumed_same_next_step"] = batch(run.dumps, saved + 1) == batch(reference_run.dumps, saved + 1)
    assert pending["resumed_same_next_step"]
    record(**pending)
