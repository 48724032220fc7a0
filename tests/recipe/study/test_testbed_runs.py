"""The testbed study's plan and commands (recipe/study/testbed/runs.py, cli.py) and its pinned workload."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.study.methods import METHODS
from recipe.study.testbed import cli
from recipe.study.testbed.build import Testbed
from recipe.study.testbed.runs import CONFIG_PATH, make_jobs, workload

TESTBED = Testbed(Path("/cache/testbed/abc"), "abc")
# Every knob that sets what a run computes; each must be written in testbed_cpu.yaml itself, so a
# change of copo_cpu.yaml's defaults cannot change the study.
PINNED = (
    "data.train_batch_size",
    "data.max_prompt_length",
    "data.max_response_length",
    "data.shuffle",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.top_p",
    "actor_rollout_ref.rollout.top_k",
    "actor_rollout_ref.rollout.val_kwargs.do_sample",
    "actor_rollout_ref.rollout.val_kwargs.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.ppo_epochs",
    "actor_rollout_ref.actor.clip_ratio",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.entropy_coeff",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.grad_clip",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.optim.weight_decay",
    "actor_rollout_ref.actor.optim.lr_warmup_steps",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "algorithm.use_kl_in_reward",
    "algorithm.norm_adv_by_std_in_grpo",
    "trainer.total_training_steps",
    "trainer.test_freq",
    "trainer.val_before_train",
    "trainer.save_freq",
)


def test_every_workload_knob_is_pinned_in_the_testbed_config() -> None:
    own = OmegaConf.load(CONFIG_PATH)
    missing = [key for key in PINNED if OmegaConf.select(own, key, default=None) is None]
    assert not missing, f"not set in {CONFIG_PATH.name}: {missing}"


def test_plan_is_interleaved_and_fingerprinted(tmp_path: Path) -> None:
    methods = ["grpo", "copo_soft", "dapo_filter"]
    jobs = make_jobs(TESTBED, methods, [0, 1], tmp_path, steps=None)
    assert [j.name for j in jobs] == [f"{m}-s{s}" for s in (0, 1) for m in methods]
    steps = int(workload().trainer.total_training_steps)
    assert all(j.steps == steps and j.fingerprint["steps"] == steps for j in jobs)
    assert all(j.env["OMP_NUM_THREADS"] == "1" and j.env["COPO_CPU_THREADS"] == "1" for j in jobs)
    first = jobs[0]
    assert first.command[1:5] == ["-m", "recipe.copo.main_copo", "--config-name", "testbed_cpu"]
    assert "data.seed=0" in first.command and "actor_rollout_ref.rollout.seed=0" in first.command
    assert f"trainer.metrics_jsonl={tmp_path / 'grpo-s0' / 'metrics.jsonl'}" in first.command
    # a pilot's shorter budget is part of the command and of the fingerprint
    pilot = make_jobs(TESTBED, ["grpo"], [0], tmp_path, steps=3)[0]
    assert "trainer.total_training_steps=3" in pilot.command and pilot.fingerprint["steps"] == 3
    assert pilot.fingerprint != first.fingerprint
    # same seed, same data order and rollout seeds for every method; only the method's overrides differ
    shared = [set(j.command) - set(METHODS[j.fingerprint["method"]]) for j in jobs[:3]]
    names = {f"trainer.experiment_name={j.name}" for j in jobs} | {
        f"{key}={tmp_path / j.name / leaf}"
        for j in jobs
        for key, leaf in (
            ("trainer.default_local_dir", "checkpoints"),
            ("trainer.metrics_jsonl", "metrics.jsonl"),
        )
    }
    assert shared[0] - names == shared[1] - names == shared[2] - names


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_composes_with_verl_schema(tmp_path: Path, method: str) -> None:
    from recipe.copo.config_check import compose_and_validate

    (job,) = make_jobs(TESTBED, [method], [3], tmp_path)
    overrides = job.command[job.command.index("--config-name") + 2 :]
    config = compose_and_validate(overrides, config_name="testbed_cpu")
    pinned = workload()
    for key in PINNED:
        assert OmegaConf.select(config, key) == OmegaConf.select(pinned, key), key
    assert config.data.seed == 3 and config.actor_rollout_ref.rollout.seed == 3
    assert config.actor_rollout_ref.model.path == str(TESTBED.model)
    assert config.trainer.resume_mode == "disable"
    assert config.algorithm.adv_estimator == ("grpo" if method in ("grpo", "dapo_filter") else "copo")
    assert bool(config.algorithm.filter_groups.enable) == (method == "dapo_filter")
    # this project's variant is soft_with_zero with the wrong answers' global advantage capped at 0
    variant = method == "copo_variant_nonpositive"
    if method.startswith("copo_"):
        blend = "soft_with_zero" if variant else method.removeprefix("copo_")
        assert config.algorithm.copo.blend_mode == blend
        assert config.algorithm.copo.wrong_answer_global == ("nonpositive" if variant else "keep")


def test_seed_and_method_parsing() -> None:
    assert cli.parse_seeds("0-3,7") == [0, 1, 2, 3, 7]
    assert cli.parse_seeds("2,1,2") == [1, 2]
    for bad in ("3-1", "a", "", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.parse_seeds(bad)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--methods", "grpo,ppo"])


def test_dry_run_builds_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COPO_CACHE", str(tmp_path / "cache"))
    assert (
        cli.main(["run", "--dry-run", "--seeds", "0", "--methods", "grpo", "--runs", str(tmp_path / "runs")])
        == 0
    )
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()
    out = capsys.readouterr().out
    assert "(1/1) grpo-s0: " in out and str(tmp_path / "cache" / "testbed") in out
