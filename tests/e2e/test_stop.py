"""A stopped run stops: SIGTERM mid-step to each launcher leaves no process behind.

Launchers covered here: ``main_copo``, ``scripts/quickstart.sh`` (and the quickstart_run.py it
starts), the SmolLM2 study driver (``scripts/study_cpu.py run``) and the testbed study driver
(``recipe.study.driver``), each over one real run (their stopping of several runs at once is tested with
stand-in runs in tests/recipe/study); the evaluation's is in tests/recipe/evaluation/test_stop.py.

SIGTERM is what ``timeout``, Slurm at the end of an allocation and ``docker stop`` send, to the
launcher's process alone (not to its group). Each test starts the launcher in a session of its own,
waits until a training step is under way, signals the launcher's pid, and then finds no process
that inherited the launcher's environment (tests/e2e/stopping.py): not the trainer, not its local
Ray cluster, not the rollout server.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.cpu_run import cpu_env, read_jsonl, run_module, tiny_recipe_overrides
from tests.e2e.stopping import kill_tagged, leftovers_after, start_tagged, tagged_processes, wait_until
from tests.paths import REPO

pytestmark = pytest.mark.e2e

RUN_TIMEOUT_S = 900


def _steps(path: Path) -> list[int]:
    return [int(r["step"]) for r in read_jsonl(path) if "actor/pg_loss" in r] if path.is_file() else []


def _sigterm_after_step_one(cmd: list[str], env: dict[str, str], metrics: list[Path], log_path: Path) -> int:
    """Start ``cmd`` tagged, wait until one of ``metrics`` logged a training step (so the next one is
    under way), SIGTERM the launcher's pid alone, and assert that no tagged process is left.
    Returns the launcher's exit code."""
    proc, tag = start_tagged(cmd, env, log_path, REPO)
    try:
        wait_until(lambda: any(_steps(m) for m in metrics), proc, RUN_TIMEOUT_S, "step 1", log_path)
        time.sleep(1.0)
        running = tagged_processes(tag)
        assert any("raylet" in p for p in running), f"the detector must see the Ray cluster: {running}"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=150)
        left = leftovers_after(tag)
        assert not left, f"processes left after SIGTERM to {cmd[:3]}:\n" + "\n".join(left)
    finally:
        kill_tagged(tag)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode


@pytest.mark.timeout(RUN_TIMEOUT_S + 300)
def test_sigterm_to_quickstart_sh_mid_step_stops_everything(tmp_path: Path) -> None:
    from recipe.models.tiny import build_tiny_qwen2

    env = {
        **cpu_env(),
        "COPO_CACHE": str(tmp_path / "cache"),
        "COPO_VENV": str(Path(sys.executable).parents[1]),
    }
    out = tmp_path / "run"
    cmd = [
        "bash",
        "scripts/quickstart.sh",
        "--model",
        str(build_tiny_qwen2(tmp_path / "tiny")),
        "--out",
        str(out),
    ]
    cmd += ["--steps", "30", "--train-size", "64", "--val-size", "4"]
    cmd += ["data.max_prompt_length=512", "data.max_response_length=16"]  # byte-level tokenizer: long prompts
    rc = _sigterm_after_step_one(cmd, env, [out / "metrics.jsonl"], tmp_path / "quickstart.log")
    assert rc == 143, f"quickstart.sh should exit 143 after SIGTERM, got {rc}"


@pytest.mark.timeout(RUN_TIMEOUT_S + 300)
def test_sigterm_to_smollm2_study_driver_mid_step_stops_everything(tmp_path: Path) -> None:
    """The SmolLM2 driver over one real quickstart run: its stop must reach the trainer's Ray cluster. Both
    runs of a chunk stopped: tests/recipe/study/test_smollm2.py (stand-in runs; a second trainer here only
    doubled the start-up on two cores)."""
    from recipe.models.tiny import build_tiny_qwen2

    env = cpu_env()
    data = tmp_path / "data"
    prep = [sys.executable, "-m", "data_prep", "reasoning_gym", "--tasks", "basic_arithmetic@easy"]
    subprocess.run([*prep, "--size", "32", "--val-size", "4", "--out", str(data)], env=env, check=True)
    runs = tmp_path / "runs"
    cmd = [sys.executable, "scripts/study_cpu.py", "run", "--model", str(build_tiny_qwen2(tmp_path / "tiny"))]
    cmd += ["--data", str(data), "--runs", str(runs), "--steps", "30", "--methods", "copo_soft"]
    cmd += ["--seeds", "0", "--parallel", "1", "--prompt-length", "512"]
    metrics = [runs / "copo_soft-s0" / "metrics.jsonl"]
    rc = _sigterm_after_step_one(cmd, env, metrics, tmp_path / "study.log")
    assert rc == 128 + signal.SIGTERM, f"the study driver should exit 143 after SIGTERM, got {rc}"


@pytest.mark.timeout(RUN_TIMEOUT_S + 300)
def test_sigterm_to_testbed_study_driver_mid_step_stops_everything(tmp_path: Path) -> None:
    """The testbed driver (``recipe.study.driver.run_jobs``) over one real trainer: the driver's handling of
    several runs at once is tests/recipe/study/test_driver.py's (stand-in runs, no trainer); what only a
    real run shows is that a stop reaches the trainer's own Ray cluster, and one run shows it (a second
    trainer beside it only doubled the test's start-up on two cores)."""
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "tests.e2e.tiny_testbed", str(tmp_path / "cache"), str(runs), "50", "grpo"]
    metrics = [runs / "grpo-s0" / "metrics.jsonl"]
    rc = _sigterm_after_step_one(cmd, cpu_env(), metrics, tmp_path / "testbed.log")
    assert rc == 128 + signal.SIGTERM, f"the testbed driver should exit 143 after SIGTERM, got {rc}"


@pytest.mark.timeout(2 * RUN_TIMEOUT_S + 120)
def test_sigterm_to_main_copo_mid_step_stops_everything_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    base, ckpt = tiny_recipe_overrides(tmp_path, steps=50)
    metrics = tmp_path / "metrics.jsonl"
    overrides = [*base, "trainer.save_freq=1", f"trainer.metrics_jsonl={metrics}"]
    log_path = tmp_path / "train.log"
    proc, tag = start_tagged(
        [sys.executable, "-m", "recipe.copo.main_copo", *overrides], cpu_env(), log_path, REPO
    )
    try:
        # step 1 trained, saved and logged: step 2 is under way
        wait_until(lambda: len(_steps(metrics)) >= 1, proc, RUN_TIMEOUT_S, "step 1", log_path)
        time.sleep(1.0)
        running = tagged_processes(tag)
        assert any("raylet" in p for p in running), f"the detector must see the Ray cluster: {running}"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        left = leftovers_after(tag)
        assert not left, "processes left after SIGTERM to main_copo:\n" + "\n".join(left)
    finally:
        kill_tagged(tag)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, "a stopped run must not report success"

    # The last checkpoint is intact: a resumed run loads it and trains the next step only.
    saved = int((ckpt / "latest_checkpointed_iteration.txt").read_text().strip())
    assert saved >= 1 and (ckpt / f"global_step_{saved}" / "actor").is_dir()
    before = _steps(metrics)
    resume = [
        *[
            o
            for o in overrides
            if not o.startswith(("trainer.total_training_steps=", "trainer.resume_mode="))
        ],
        f"trainer.total_training_steps={saved + 1}",
        "trainer.resume_mode=auto",
    ]
    result = run_module(
        "recipe.copo.main_copo", resume, log_path=tmp_path / "resume.log", timeout=RUN_TIMEOUT_S
    )
    assert result.returncode == 0, result.log[-6000:]
    assert f"global_step_{saved}" in result.log
    assert _steps(metrics) == [*before[:saved], saved + 1]
