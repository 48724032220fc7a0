"""recipe.quickstart.run: the trainer's overrides, a finished or interrupted run folder, and stopping
(a real launcher process with a stand-in trainer that ignores SIGINT and has a child of its own)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from recipe.quickstart import run as qs
from tests.paths import REPO


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


def test_finished_run_folder_starts_fresh_and_interrupted_one_resumes(tmp_path: Path, monkeypatch) -> None:
    # the trainer: a process that exits 0 at once and writes nothing
    monkeypatch.setattr(qs, "trainer_command", lambda args, extra: [sys.executable, "-c", "pass"])
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


# The launcher with a stand-in trainer: it ignores SIGINT, noting its arrival in <pids>.sigint (so a
# stop takes the grace period and then SIGTERM), starts a child of its own and reports both pids.
LAUNCHER = textwrap.dedent(
    """
    import sys
    from recipe.quickstart import run as qs

    tree = (
        "import os, signal, subprocess, sys, time;"
        "signal.signal(signal.SIGINT, lambda *a: open(sys.argv[1] + '.sigint', 'w').close());"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        "open(sys.argv[1], 'w').write(str(os.getpid()) + ' ' + str(p.pid)); time.sleep(600)"
    )
    qs.trainer_command = lambda args, extra: [sys.executable, "-c", tree, sys.argv[1]]
    qs.machine_speed = lambda model: 1.0
    qs.STOP_GRACE_S = 10.0
    sys.exit(qs.main(["--model", sys.argv[2], "--data", sys.argv[2], "--out", sys.argv[2] + "/run"]))
    """
)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_stopped_quickstart_stops_its_trainer_even_when_signalled_twice(tmp_path: Path) -> None:
    """SIGTERM to the launcher's process group (Ctrl-C / scancel reach every process of it; the shell
    launcher forwards it once more): the trainer and its child are gone and the exit code is 143."""
    pids = tmp_path / "pids"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(pids), str(tmp_path)],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (pids.is_file() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    trainer, child = map(int, pids.read_text().split())
    assert _alive(trainer) and _alive(child)
    os.killpg(launcher.pid, signal.SIGTERM)
    marker = Path(f"{pids}.sigint")  # the trainer got (and ignored) its SIGINT: the 10-s grace has begun
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the trainer never got the launcher's SIGINT"
        time.sleep(0.05)
    assert launcher.poll() is None
    os.killpg(launcher.pid, signal.SIGTERM)
    out, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err
    deadline = time.monotonic() + 10
    while (_alive(trainer) or _alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(trainer) and not _alive(child)
    assert not (tmp_path / "run" / "summary.json").exists()


def test_rollout_vllm_adds_the_rollout_and_sleep_mode_off_before_the_users_overrides() -> None:
    from recipe.cpu_backend.vllm_rollout import SLEEP_KEY

    assert qs.build_overrides(_args(rollout="hf"), []) == qs.build_overrides(_args(), [])
    vllm = qs.build_overrides(_args(rollout="vllm"), ["x.y=1"])
    assert vllm[-1] == "x.y=1"  # the user's override stays last: it wins
    assert "actor_rollout_ref.rollout.name=vllm" in vllm and f"+{SLEEP_KEY}=false" in vllm
    assert sorted(set(vllm) - set(qs.build_overrides(_args(), ["x.y=1"]))) == sorted(
        ["actor_rollout_ref.rollout.name=vllm", f"+{SLEEP_KEY}=false"]
    )
    args, _ = qs.parse_args(["--model", "m", "--data", "d", "--out", "o"])
    assert args.rollout == "hf"
