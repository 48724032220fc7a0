"""scripts/quickstart.sh argument handling and scripts/quickstart_run.py's metric reading (no training)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_workload_comes_from_copo_cpu_yaml_unless_given() -> None:
    """The quickstart passes no workload key of its own: copo_cpu.yaml's defaults are the quickstart's."""
    args = _args(batch=None, n=None, prompt_length=None, response_length=None, lr=None, mini_batch=None)
    overrides = qs.build_overrides(args, [])
    workload_keys = set(qs.WORKLOAD_KEYS.values()) | {
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.use_kl_loss",
        "algorithm.rollout_correction.bypass_mode",
    }
    assert not [o for o in overrides if o.split("=", 1)[0] in workload_keys]
    given = qs.build_overrides(_args(n=6, lr=1e-5, batch=None, mini_batch=None), [])
    assert "actor_rollout_ref.rollout.n=6" in given and "actor_rollout_ref.actor.optim.lr=1e-05" in given


def test_mini_batch_zero_means_one_update_per_step() -> None:
    from recipe.copo.config_check import compose

    overrides = qs.build_overrides(_args(mini_batch=0, batch=None), [])
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=${data.train_batch_size}" in overrides
    config = compose([o for o in overrides[2:] if "=" in o], config_name="copo_cpu")
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == config.data.train_batch_size
    six = qs.build_overrides(_args(mini_batch=0, batch=6), [])
    config = compose([o for o in six[2:] if "=" in o], config_name="copo_cpu")
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 6


def test_paired_bootstrap_ci_and_mcnemar_against_direct_computations() -> None:
    import math

    before = [0.0] * 30 + [1.0] * 10
    after = [1.0] * 12 + [0.0] * 18 + [1.0] * 8 + [0.0] * 2  # 12 fixed, 2 broken of 40
    mean, low, high = qs.paired_bootstrap_ci(before, after, resamples=20000, seed=1)
    assert mean == (12 - 2) / 40
    # normal approximation of the same interval: the bootstrap's should be close to it
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / len(diffs))
    half = 1.96 * sd / math.sqrt(len(diffs))
    assert abs(low - (mean - half)) < 0.03 and abs(high - (mean + half)) < 0.03
    assert low > 0
    # exact binomial tail: P(X <= 2 | X ~ Bin(14, 1/2)) doubled
    assert qs.mcnemar_p(12, 2) == pytest.approx(2 * (1 + 14 + 91) / 2**14)
    assert qs.mcnemar_p(0, 0) == 1.0 and qs.mcnemar_p(5, 5) == 1.0


def test_validation_comparison_pairs_prompts_across_dumps(tmp_path: Path) -> None:
    val = tmp_path / qs.VAL_DIR
    val.mkdir()
    # q5 appears twice (a validation set may repeat a problem): both copies are kept, in order
    rows0 = [{"input": f"q{min(i, 5)}", "score": float(i < 2)} for i in range(7)]
    rows3 = [{"input": f"q{min(i, 5)}", "score": float(i in (0, 3, 4, 6))} for i in range(7)]
    (val / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows0))
    (val / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows3))
    got = qs.validation_comparison(val, steps=3)
    assert got["prompts"] == 7 and got["improved"] == 3 and got["worsened"] == 1
    assert got["before"] == pytest.approx(2 / 7) and got["after"] == pytest.approx(4 / 7)
    assert qs.validation_comparison(val, steps=4) is None


def test_validation_verdict_names_what_is_missing() -> None:
    assert qs.validation_verdict(0.2, 0.3, (0.01, 0.2)) == "improved"
    assert qs.validation_verdict(0.2, 0.3, (-0.05, 0.2)).startswith("higher, but within noise")
    assert qs.validation_verdict(0.2, 0.3).startswith("higher (no per-prompt scores")
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
    monkeypatch.setattr(qs, "machine_speed", lambda model: 50.0)
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


def test_stop_process_group_escalates_when_sigint_is_ignored() -> None:
    import os
    import sys
    import time

    code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "up"
    t0 = time.monotonic()
    qs.stop_process_group(proc, grace_s=0.5)
    assert proc.poll() is not None and time.monotonic() - t0 < 10
    assert proc.returncode == -15  # SIGINT was ignored, SIGTERM ended it
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)


def test_venv_ready_finds_the_packages_and_misses_them_without_site_packages(tmp_path: Path) -> None:
    """scripts/venv_ready.sh decides whether quickstart.sh / study_cpu.sh run setup_env.sh."""

    def ready(python: str) -> bool:
        cmd = f"source scripts/venv_ready.sh && venv_ready {shlex.quote(python)}"
        return subprocess.run(["bash", "-c", cmd], cwd=REPO).returncode == 0

    assert ready(sys.executable)
    bare = tmp_path / "python-without-site-packages"
    bare.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')  # -S: no site-packages
    bare.chmod(0o755)
    assert not ready(str(bare))
    assert not ready(str(tmp_path / "no-such-python"))
