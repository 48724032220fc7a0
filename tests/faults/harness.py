"""Real training runs to break: start ``main_copo`` on the tiny model, watch it, inject, stop, resume.

Every process a run starts carries a tag in its environment (tests/e2e/stopping.py), so "nothing of the
run is left" is checked on /proc, whatever re-parented itself. Each run writes ``metrics.jsonl`` and
its rollout batches (``trainer.rollout_data_dir``: one ``<step>.jsonl`` per step, the prompts it
trained on), so a resumed step can be compared with the same step of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from recipe import launch
from recipe.launch import RunSpec
from tests.e2e.cpu_run import PARITY_REWARD, cpu_env, write_prompt_parquet
from tests.e2e.stopping import kill_tagged, start_tagged, tagged_processes
from tests.paths import REPO

RUN_TIMEOUT_S = 900
# One model for every fault run: big enough that a checkpoint (~110 MB of model and Adam shards) takes a
# moment to write, so a test can land a kill inside the save; small enough for steps of a few seconds.
MODEL_SHAPE = {"num_layers": 4, "hidden_size": 512}


@dataclass
class TinyRun:
    """One run folder: its checkpoint root, metrics file, rollout dumps and the spec that makes it."""

    folder: Path
    ckpt: Path
    spec: RunSpec

    @property
    def metrics(self) -> Path:
        return self.folder / "metrics.jsonl"

    @property
    def dumps(self) -> Path:
        return self.folder / "rollouts"

    def command(self, steps: int, *extra: str) -> list[str]:
        """The trainer's command line for ``steps`` steps; ``extra`` overrides come last."""
        return launch.command(replace(self.spec, steps=steps, extra=(*self.spec.extra, *extra)))


def build_inputs(folder: Path) -> tuple[Path, Path, Path]:
    """The model and the train/val parquets every fault run shares: (model, train, val)."""
    from recipe.models.tiny import build_tiny_qwen2

    model = build_tiny_qwen2(folder / "model", **MODEL_SHAPE)
    train = write_prompt_parquet(folder / "train.parquet", 16, seed=0)
    val = write_prompt_parquet(folder / "val.parquet", 4, seed=1)
    return model, train, val


def tiny_run(
    folder: Path, inputs: tuple[Path, Path, Path], *, ckpt: Path | None = None, extra: Sequence[str] = ()
) -> TinyRun:
    """A ``copo_cpu`` tiny run (recipe.launch) that saves every step, resumes itself and dumps its
    rollouts."""
    model, train, val = inputs
    folder.mkdir(parents=True, exist_ok=True)
    ckpt = ckpt or folder / "ckpt"
    settings = {
        **launch.TINY_CPU,
        "reward.custom_reward_function.path": PARITY_REWARD,
        "trainer.save_freq": 1,
        "trainer.resume_mode": "auto",
        "trainer.rollout_data_dir": folder / "rollouts",
    }
    spec = launch.tiny_run(
        "copo_cpu",
        model=model,
        train_files=train,
        val_files=val,
        settings=settings,
        checkpoints=ckpt,
        metrics=folder / "metrics.jsonl",
        extra=tuple(extra),
    )
    return TinyRun(folder=folder, ckpt=ckpt, spec=spec)


def logged_steps(metrics: Path) -> list[int]:
    """Training steps with a line in ``metrics.jsonl``, in file order (a repeated step shows twice)."""
    if not metrics.is_file():
        return []
    steps = []
    for line in metrics.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if any(k.startswith("actor/") for k in row):
                steps.append(int(row["step"]))
    return steps


def batch(dumps: Path, step: int) -> list[tuple[str, str]]:
    """The (prompt, gold answer) pairs a step trained on, sorted (responses and scores left out)."""
    rows = [json.loads(line) for line in (dumps / f"{step}.jsonl").read_text().splitlines() if line.strip()]
    return sorted((r["input"], str(r["gts"])) for r in rows)


class Launched:
    """A started launcher: its process, its tag, its log."""

    def __init__(
        self, cmd: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path = REPO
    ) -> None:
        self.cmd = list(cmd)
        self.log = log
        self.proc, self.tag = start_tagged(self.cmd, env or cpu_env(), log, cwd)

    def processes(self) -> list[str]:
        return tagged_processes(self.tag)

    def pids_of(self, prefix: str) -> list[int]:
        """PIDs of the run's processes whose command line starts with ``prefix`` (e.g. ``ray::WorkerDict``)."""
        return [int(p.split(" ", 1)[0]) for p in self.processes() if p.split(" ", 1)[1].startswith(prefix)]

    def wait_for(
        self, condition: Callable[[], bool], what: str, timeout: float = RUN_TIMEOUT_S, poll_s: float = 0.5
    ) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(f"exited ({self.proc.returncode}) before {what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.tail()}")
            time.sleep(poll_s)

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.is_file() else ""

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""

    def signal_group(self, signum: int) -> None:
        """``signum`` to every process of the launcher's process group (a terminal's Ctrl-C, Slurm's scancel)."""
        os.killpg(self.proc.pid, signum)

    def kill_all(self) -> int:
        """SIGKILL to every process of the run at once (a node losing power); returns how many."""
        pids = [int(p.split(" ", 1)[0]) for p in self.processes()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)

    def stopped_after(self, t0: float, timeout: float) -> tuple[float, list[str]]:
        """Wait until the launcher exited and no process of the run is left (or ``timeout``); return the
        seconds since ``t0`` and what is still alive."""
        deadline = t0 + timeout
        left = self.processes()
        while time.monotonic() < deadline:
            left = self.processes() if self.proc.poll() is not None else ["launcher still running"]
            if not left:
                return time.monotonic() - t0, []
            time.sleep(0.2)
        return time.monotonic() - t0, left

    def cleanup(self) -> None:
        kill_tagged(self.tag)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Finished:
    """A launcher run to its end: exit code, log, what of it was still alive after it exited, and how long
    after its exit the last process of the run was gone."""

    rc: int
    log: str
    left: list[str]
    clean_after_exit_s: float


def run_to_end(cmd: Sequence[str], log: Path, timeout: float = RUN_TIMEOUT_S) -> Finished:
    """Run ``cmd`` to completion in a session of its own. Leaves nothing behind (what it left is reported)."""
    launched = Launched(cmd, log)
    try:
        try:
            rc = launched.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = -9
        clean_s, left = launched.stopped_after(time.monotonic(), timeout=60)
    finally:
        launched.cleanup()
    return Finished(rc, launched.text(), left, clean_s)
