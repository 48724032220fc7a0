"""Every shipped run script composes to a valid config (Hydra + verl's dataclasses + the recipe's
checks) without running anything, carries the paper's settings, and lets user overrides win."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig

from recipe.copo.config_check import CopoConfigError, compose_and_validate
from tests.paths import REPO

RECIPE = REPO / "recipe" / "copo"
RUN_SCRIPTS = sorted(p.name for p in RECIPE.glob("run_*.sh") if p.name != "run_ablation.sh")
ABLATIONS = ["global_only", "soft", "soft_with_forced", "zero", "forced", "soft_with_zero", "local_only"]
ENTRY = ["-m", "recipe.copo.main_copo"]


def dry_run(script: str, *args: str, **env: str) -> list[str]:
    """The command the script would run (DRY_RUN=1 prints it as one shell-quoted line)."""
    proc = subprocess.run(
        ["bash", str(RECIPE / script), *args],
        cwd=REPO,
        env={**os.environ, "DRY_RUN": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout  # exactly one command line on stdout
    return shlex.split(lines[0])


def overrides_of(argv: list[str]) -> list[str]:
    at = next(i for i in range(len(argv) - 1) if argv[i : i + 2] == ENTRY)
    return argv[at + 2 :]


def compose_script(script: str, *args: str, **env: str) -> DictConfig:
    return compose_and_validate(overrides_of(dry_run(script, *args, **env)))


def test_every_family_is_shipped() -> None:
    for name in (
        "run_copo_qwen2.5_7b.sh",
        "run_copo_qwen2.5_3b.sh",
        "run_grpo_qwen2.5_7b.sh",
        "run_grpo_qwen2.5_3b.sh",
        "run_dapo_qwen2.5_7b.sh",
        "run_dapo_qwen2.5_3b.sh",
        "run_ablation.sh",
        "submit_ray_job.sh",
    ):
        assert (RECIPE / name).is_file(), name


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_run_script_composes_and_validates(script: str) -> None:
    config = compose_script(script)
    assert config.actor_rollout_ref.rollout.n >= 2


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_ablation_script_composes(ablation: str) -> None:
    config = compose_script("run_ablation.sh", ABLATION=ablation)
    assert config.algorithm.copo.blend_mode == ablation
    assert config.algorithm.adv_estimator == "copo"


def test_ablation_script_rejects_unknown_mode() -> None:
    proc = subprocess.run(
        ["bash", str(RECIPE / "run_ablation.sh")],
        cwd=REPO,
        env={**os.environ, "DRY_RUN": "1", "ABLATION": "softt"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "ABLATION" in proc.stderr


@pytest.mark.parametrize(
    ("script", "n", "k", "b", "model"),
    [
        ("run_copo_qwen2.5_7b.sh", 8, 5.0, 1.0, "Qwen/Qwen2.5-7B-Instruct"),
        ("run_copo_qwen2.5_3b.sh", 6, 20.0, 1.5, "Qwen/Qwen2.5-3B-Instruct"),
    ],
)
def test_copo_scripts_carry_the_paper_settings(script: str, n: int, k: float, b: float, model: str) -> None:
    c = compose_script(script)
    actor, rollout = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert (c.algorithm.adv_estimator, actor.policy_loss.loss_mode) == ("copo", "copo")
    assert (rollout.n, float(c.algorithm.copo.k), float(c.algorithm.copo.b)) == (n, k, b)
    assert c.algorithm.copo.blend_mode == "soft_with_zero"
    assert c.actor_rollout_ref.model.path == model
    assert (c.data.train_batch_size, actor.ppo_mini_batch_size) == (512, 32)
    assert actor.optim.lr == pytest.approx(1e-6) and actor.optim.lr_warmup_steps == 0
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.2)
    assert (c.data.max_prompt_length, c.data.max_response_length) == (1024, 2048)
    assert rollout.temperature == 1.0
    assert (
        actor.use_kl_loss
        and actor.kl_loss_type == "low_var_kl"
        and actor.kl_loss_coef == pytest.approx(0.001)
    )
    assert actor.entropy_coeff == 0 and actor.loss_agg_mode == "seq-mean-token-mean"
    assert c.trainer.total_training_steps == 70
    assert rollout.val_kwargs.n == 8 and rollout.val_kwargs.temperature == 1.0
    assert c.reward.custom_reward_function.path == "pkg://recipe.reward"


@pytest.mark.parametrize("size", ["7b", "3b"])
def test_grpo_and_dapo_baselines(size: str) -> None:
    copo = compose_script(f"run_copo_qwen2.5_{size}.sh")
    grpo = compose_script(f"run_grpo_qwen2.5_{size}.sh")
    assert (grpo.algorithm.adv_estimator, grpo.actor_rollout_ref.actor.policy_loss.loss_mode) == (
        "grpo",
        "vanilla",
    )
    assert grpo.actor_rollout_ref.rollout.n == copo.actor_rollout_ref.rollout.n
    assert grpo.actor_rollout_ref.actor.kl_loss_coef == copo.actor_rollout_ref.actor.kl_loss_coef
    dapo = compose_script(f"run_dapo_qwen2.5_{size}.sh")
    actor = dapo.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert not actor.use_kl_loss and not dapo.algorithm.use_kl_in_reward
    assert dapo.algorithm.filter_groups.enable and dapo.algorithm.filter_groups.metric == "acc"
    assert dapo.reward.reward_manager.name == "dapo"
    assert dapo.reward.reward_kwargs.overlong_buffer_cfg.enable
    assert dapo.reward.reward_kwargs.max_resp_len == 2048


def test_user_overrides_win_over_script_defaults() -> None:
    argv = dry_run("run_copo_qwen2.5_7b.sh", "algorithm.copo.k=9", "actor_rollout_ref.rollout.n=4")
    config = compose_and_validate(overrides_of(argv))
    assert config.algorithm.copo.k == 9 and config.actor_rollout_ref.rollout.n == 4


def test_env_vars_select_estimator_for_reuse_by_gcpo() -> None:
    argv = dry_run(
        "run_copo_qwen2.5_7b.sh",
        ADV_ESTIMATOR="gcpo",
        LOSS_MODE="vanilla",
        EXTRA_ARGS="algorithm.gcpo.beta=0.5 algorithm.gcpo.embedder=hash",
    )
    config = compose_and_validate(overrides_of(argv))
    assert (config.algorithm.adv_estimator, config.actor_rollout_ref.actor.policy_loss.loss_mode) == (
        "gcpo",
        "vanilla",
    )
    assert config.algorithm.gcpo.beta == 0.5 and config.algorithm.gcpo.embedder == "hash"


def test_submit_script_dry_run_wraps_the_run_script() -> None:
    argv = dry_run(
        "submit_ray_job.sh",
        "recipe/copo/run_copo_qwen2.5_7b.sh",
        "trainer.nnodes=2",
        RAY_ADDRESS="http://h:8265",
    )
    assert argv[:3] == ["ray", "job", "submit"]
    assert "--address=http://h:8265" in argv and "--runtime-env=recipe/copo/runtime_env.yaml" in argv
    assert argv[argv.index("--") + 1 :] == ["bash", "recipe/copo/run_copo_qwen2.5_7b.sh", "trainer.nnodes=2"]


# --- negative cases: a typo or an inconsistent selection must fail before anything runs ---------


@pytest.mark.parametrize(
    "typo",
    [
        "actor_rollout_ref.actor.clip_ratio_hgih=0.3",
        "algorithm.copo.kk=3",
        "trainer.total_trainig_steps=5",
        "data.train_batchsize=8",
    ],
)
def test_typo_in_any_key_fails(typo: str) -> None:
    with pytest.raises(ConfigCompositionException):
        compose_script("run_copo_qwen2.5_7b.sh", typo)


def test_appended_unknown_copo_key_fails() -> None:
    with pytest.raises(CopoConfigError, match=r"algorithm\.copo\.kk"):
        compose_script("run_copo_qwen2.5_7b.sh", "+algorithm.copo.kk=3")
    with pytest.raises(CopoConfigError, match=r"algorithm\.gcpo\.alhpa"):
        compose_script("run_copo_qwen2.5_7b.sh", "+algorithm.gcpo.alhpa=3")


def test_appended_unknown_actor_key_fails_in_verl_dataclass() -> None:
    with pytest.raises(Exception, match="clip_ratio_hgih"):
        compose_script("run_copo_qwen2.5_7b.sh", "+actor_rollout_ref.actor.clip_ratio_hgih=0.3")


@pytest.mark.parametrize(
    "overrides",
    [
        ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"],
        ["algorithm.adv_estimator=grpo"],
    ],
)
def test_estimator_loss_mismatch_fails_naming_both_keys(overrides: list[str]) -> None:
    with pytest.raises(CopoConfigError) as err:
        compose_script("run_copo_qwen2.5_7b.sh", *overrides)
    assert "algorithm.adv_estimator" in str(err.value) and "policy_loss.loss_mode" in str(err.value)


def test_group_size_one_fails() -> None:
    with pytest.raises(CopoConfigError, match=r"rollout\.n must be >= 2"):
        compose_script("run_copo_qwen2.5_7b.sh", "actor_rollout_ref.rollout.n=1")


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("algorithm.copo.k=-1", "k must be >= 0"),
        ("algorithm.copo.blend_mode=softer", "blend_mode"),
        ("algorithm.copo.entropy_source=answers", "entropy_source"),
        ("algorithm.copo.local_estimator=ppo", "local_estimator"),
        ("algorithm.gcpo.exact_max_g=21", "exact_max_g"),  # above copo_core.gcpo.MAX_EXACT_G
        ("algorithm.gcpo.exact_max_g=-1", "exact_max_g"),
        ("trainer.use_v1=false", "use_v1"),
        ("algorithm.use_kl_in_reward=true", "use_kl_in_reward"),
    ],
)
def test_bad_values_fail(override: str, match: str) -> None:
    with pytest.raises(CopoConfigError, match=match):
        compose_script("run_copo_qwen2.5_7b.sh", override)


def test_gcpo_estimator_needs_vanilla_loss() -> None:
    with pytest.raises(CopoConfigError, match="vanilla"):
        compose_script("run_copo_qwen2.5_7b.sh", ADV_ESTIMATOR="gcpo", LOSS_MODE="copo")
