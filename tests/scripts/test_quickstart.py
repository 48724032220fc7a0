"""scripts/quickstart.sh argument handling and scripts/quickstart_run.py's metric reading (no training)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
from pathlib import Path

from tests.paths import REPO


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


qs = _load("quickstart_run")


def test_help_and_bad_arguments() -> None:
    ok = subprocess.run(["bash", "scripts/quickstart.sh", "--help"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0 and "--steps N" in ok.stdout and "--algo NAME" in ok.stdout
    bad = subprocess.run(
        ["bash", "scripts/quickstart.sh", "--bogus"], cwd=REPO, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "unknown argument '--bogus'" in bad.stderr
    algo = subprocess.run(
        ["bash", "scripts/quickstart.sh", "--algo", "ppo"], cwd=REPO, capture_output=True, text=True
    )
    assert algo.returncode == 2 and "--algo must be copo or grpo" in algo.stderr


def _args(**kw) -> argparse.Namespace:
    base = dict(
        model="/m",
        data="/d",
        out="/o",
        steps=5,
        algo="copo",
        batch=8,
        n=4,
        prompt_length=96,
        response_length=96,
        lr=1e-5,
        seed=3,
        mini_batch=4,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def test_overrides_select_the_algorithm_and_user_overrides_come_last() -> None:
    copo = qs.build_overrides(_args(), ["actor_rollout_ref.actor.optim.lr=2e-5"])
    assert copo[:2] == ["--config-name", "copo_cpu"]
    assert (
        "algorithm.adv_estimator=copo" in copo
        and "actor_rollout_ref.actor.policy_loss.loss_mode=copo" in copo
    )
    assert "trainer.total_training_steps=5" in copo and "data.train_files=/d/train.parquet" in copo
    assert copo[-1] == "actor_rollout_ref.actor.optim.lr=2e-5"
    grpo = qs.build_overrides(_args(algo="grpo"), [])
    assert (
        "algorithm.adv_estimator=grpo" in grpo
        and "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla" in grpo
    )


def test_validation_verdict_names_what_is_missing() -> None:
    assert qs.validation_verdict(0.2, 0.3) == "improved"
    assert qs.validation_verdict(0.3, 0.3).startswith("did not improve")
    assert qs.validation_verdict(None, 0.3).startswith("no validation before training")
    assert qs.validation_verdict(0.2, None).startswith("no validation after training")


def test_progress_line() -> None:
    rows = [
        {"step": 1, "critic/score/mean": 0.5, "signal/frac_groups_zero_variance": 0.25, "actor/entropy": 1.5},
        {"step": 2, "critic/score/mean": 0.625, "timing_s/step": 12.0},
    ]
    line = qs.progress_line(rows[0], total=4, step_times=[])
    assert "step 1/4" in line and "reward 0.500" in line and "acc 0.500" in line
    assert "zero-var 0.25" in line and "token-entropy 1.500" in line
    assert "ETA n/as" in line
    line = qs.progress_line(rows[1], total=4, step_times=[10.0, 12.0])
    assert "step 12.0s" in line and "ETA 22s" in line  # mean 11 s x 2 steps left


class _FinishedProcess:
    """Stands in for the trainer subprocess: exits 0 at once, writes nothing."""

    pid = 0
    returncode = 0

    def __init__(self, cmd, **kwargs) -> None:
        self.cmd = cmd

    def poll(self) -> int:
        return 0


def test_finished_run_folder_starts_fresh_and_interrupted_one_resumes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(qs.subprocess, "Popen", _FinishedProcess)
    out = tmp_path / "run"
    (out / "checkpoints" / "global_step_6").mkdir(parents=True)
    (out / "metrics.jsonl").write_text(json.dumps({"step": 6, "critic/score/mean": 0.5}) + "\n")
    (out / "summary.json").write_text("{}")
    args = _args(out=str(out), data=str(tmp_path), model=str(tmp_path), label="quickstart")
    assert qs.run(args, []) == 0
    assert not (out / "checkpoints").exists(), (
        "a finished run's checkpoint would make the new run resume at its end"
    )
    assert json.loads((out / "summary.json").read_text())["steps"] == 0  # the old step-6 row is gone
    # interrupted: no summary.json -> checkpoints and metrics are kept for trainer.resume_mode=auto
    (out / "summary.json").unlink()
    (out / "checkpoints" / "global_step_3").mkdir(parents=True)
    (out / "metrics.jsonl").write_text(json.dumps({"step": 3, "critic/score/mean": 0.5}) + "\n")
    assert qs.run(args, []) == 0
    assert (out / "checkpoints" / "global_step_3").is_dir()
    assert json.loads((out / "summary.json").read_text())["steps"] == 1
