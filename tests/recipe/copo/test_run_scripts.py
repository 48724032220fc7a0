"""Every shipped run script composes to a valid config (Hydra + verl's dataclasses + the recipe's
checks) without running anything, carries the paper's settings, and lets user overrides win.

Each run script is `python -m recipe.copo.main_copo --config-name <run> "$@"`: the tests compose the
command the script prints (DRY_RUN=1), config name included, with the paths the configs read from the
environment set (DATA_DIR, CKPT_DIR)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig

from copo_core import BLEND_MODES, ConfigError
from recipe.copo.config_check import compose_and_validate
from tests.paths import REPO

RECIPE = REPO / "recipe" / "copo"
RUN_SCRIPTS = sorted(p.name for p in RECIPE.glob("run_*.sh") if p.name != "run_ablation.sh")
ABLATIONS = ["global_only", "soft", "soft_with_forced", "zero", "forced", "soft_with_zero", "local_only"]
ENTRY = ["-m", "recipe.copo.main_copo"]
PATHS = {"DATA_DIR": "/shared/data/copo", "CKPT_DIR": "/shared/ckpts"}
# Settings that used to travel as environment variables between scripts: none may reach a config now.
OLD_SETTING_VARS = {
    "ADV_ESTIMATOR": "gcpo",
    "LOSS_MODE": "vanilla",
    "COPO_K": "9",
    "COPO_B": "3",
    "BLEND_MODE": "soft",
    "ROLLOUT_N": "3",
    "TRAIN_BATCH_SIZE": "8",
    "TOTAL_STEPS": "2",
    "GCPO_ALPHA": "2.0",
    "GCPO_EMBEDDER": "hash",
    "EXTRA_ARGS": "algorithm.copo.k=9",
    "ABLATION": "zero",
    "SIZE": "3b",
}


@pytest.fixture(autouse=True)
def _paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in PATHS.items():
        monkeypatch.setenv(key, value)
    for key in ("MODEL_PATH", "NNODES", "GPUS_PER_NODE", *OLD_SETTING_VARS):
        monkeypatch.delenv(key, raising=False)
    yield


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


def config_and_overrides(argv: list[str]) -> tuple[str, list[str]]:
    """``--config-name X OVERRIDES`` after ``-m recipe.copo.main_copo`` (every run script names one)."""
    at = next(i for i in range(len(argv) - 1) if argv[i : i + 2] == ENTRY)
    rest = argv[at + 2 :]
    assert rest[0] == "--config-name", rest
    return rest[1], rest[2:]


def overrides_of(argv: list[str]) -> list[str]:
    return config_and_overrides(argv)[1]


def compose_script(script: str, *args: str, **env: str) -> DictConfig:
    config_name, overrides = config_and_overrides(dry_run(script, *args, **env))
    return compose_and_validate(overrides, config_name=config_name)


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
    for name in (
        "copo_qwen2.5_7b",
        "copo_qwen2.5_3b",
        "grpo_qwen2.5_7b",
        "grpo_qwen2.5_3b",
        "dapo_qwen2.5_7b",
        "dapo_qwen2.5_3b",
        "gcpo_qwen2.5_7b",
    ):
        assert (RECIPE / "config" / f"{name}.yaml").is_file(), name
        assert (RECIPE / f"run_{name}.sh").is_file(), name  # run_<config>.sh runs config <config>
        assert config_and_overrides(dry_run(f"run_{name}.sh")) == (name, [])


def test_ablation_group_offers_every_blend_mode() -> None:
    # One option per mode of copo_core (the modes' one source of truth), no more, no fewer.
    options = sorted(p.stem for p in (RECIPE / "config" / "ablation").glob("*.yaml"))
    assert options == sorted(BLEND_MODES) == sorted(ABLATIONS)


@pytest.mark.parametrize("script", RUN_SCRIPTS)
def test_run_script_composes_and_validates(script: str) -> None:
    config = compose_script(script)
    assert config.actor_rollout_ref.rollout.n >= 2


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_ablation_script_composes(ablation: str) -> None:
    config = compose_script("run_ablation.sh", ablation)
    assert config.algorithm.copo.blend_mode == ablation
    assert config.algorithm.adv_estimator == "copo"
    # each ablation trains into its own folder (a resume never picks up another mode's checkpoint)
    assert f"copo_{ablation}_qwen2.5_7b" in config.trainer.default_local_dir
    three_b = compose_script("run_ablation.sh", ablation, "3b")
    assert three_b.algorithm.copo.blend_mode == ablation and three_b.actor_rollout_ref.rollout.n == 6


def test_ablation_script_rejects_unknown_mode() -> None:
    proc = subprocess.run(
        ["bash", str(RECIPE / "run_ablation.sh"), "softt"],
        cwd=REPO,
        env={**os.environ, "DRY_RUN": "1"},
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
    config_name, overrides = config_and_overrides(argv)
    config = compose_and_validate(overrides, config_name=config_name)
    assert config.algorithm.copo.k == 9 and config.actor_rollout_ref.rollout.n == 4


def test_overrides_select_estimator_for_reuse_by_gcpo() -> None:
    argv = dry_run(
        "run_copo_qwen2.5_7b.sh",
        "algorithm.adv_estimator=gcpo",
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
        "algorithm.gcpo.beta=0.5",
        "algorithm.gcpo.embedder=hash",
    )
    config_name, overrides = config_and_overrides(argv)
    config = compose_and_validate(overrides, config_name=config_name)
    assert (config.algorithm.adv_estimator, config.actor_rollout_ref.actor.policy_loss.loss_mode) == (
        "gcpo",
        "vanilla",
    )
    assert config.algorithm.gcpo.beta == 0.5 and config.algorithm.gcpo.embedder == "hash"


def test_settings_never_come_from_the_environment() -> None:
    # The old env-var chains (COPO_K, GCPO_ALPHA, ADV_ESTIMATOR, ...) are gone: setting them changes
    # nothing, so a validated config cannot differ from the trained one through them.
    for script in RUN_SCRIPTS:
        assert dry_run(script, **OLD_SETTING_VARS) == dry_run(script), script
    config = compose_script("run_copo_qwen2.5_7b.sh", **OLD_SETTING_VARS)
    assert (config.algorithm.adv_estimator, float(config.algorithm.copo.k)) == ("copo", 5.0)


def test_paths_and_shape_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_PATH", "/models/q7")
    monkeypatch.setenv("NNODES", "2")
    monkeypatch.setenv("GPUS_PER_NODE", "4")
    c = compose_script("run_copo_qwen2.5_7b.sh")
    assert c.actor_rollout_ref.model.path == "/models/q7"
    assert (c.trainer.nnodes, c.trainer.n_gpus_per_node) == (2, 4)
    assert c.data.train_files == "/shared/data/copo/dapo_math_17k.parquet"
    assert list(c.data.val_files) == ["/shared/data/copo/math500.parquet", "/shared/data/copo/gsm8k.parquet"]
    assert c.trainer.default_local_dir == f"/shared/ckpts/copo/{c.trainer.experiment_name}"


@pytest.mark.parametrize("missing", ["DATA_DIR", "CKPT_DIR"])
def test_required_paths_fail_naming_the_variable(missing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(missing)
    from omegaconf import OmegaConf

    with pytest.raises(Exception, match=missing):
        OmegaConf.resolve(compose_script("run_copo_qwen2.5_7b.sh"))


def test_submit_script_dry_run_wraps_the_run_script() -> None:
    argv = dry_run(
        "submit_ray_job.sh",
        "recipe/copo/run_copo_qwen2.5_7b.sh",
        "trainer.nnodes=2",
        RAY_ADDRESS="http://h:8265",
        PYTHON=sys.executable,  # the interpreter the job runs with on the cluster
    )
    assert os.path.basename(argv[0]) == "ray" and argv[1:3] == ["job", "submit"]
    assert "--address=http://h:8265" in argv and any(a.startswith("--runtime-env-json=") for a in argv)
    assert argv[argv.index("--") + 1 :] == [
        sys.executable,
        *ENTRY,
        "--config-name",
        "copo_qwen2.5_7b",
        "trainer.nnodes=2",
    ]


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
    with pytest.raises(ConfigError, match=r"algorithm\.copo\.kk"):
        compose_script("run_copo_qwen2.5_7b.sh", "+algorithm.copo.kk=3")
    with pytest.raises(ConfigError, match=r"algorithm\.gcpo\.alhpa"):
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
    with pytest.raises(ConfigError) as err:
        compose_script("run_copo_qwen2.5_7b.sh", *overrides)
    assert "algorithm.adv_estimator" in str(err.value) and "policy_loss.loss_mode" in str(err.value)


def test_group_size_one_fails() -> None:
    with pytest.raises(ConfigError, match=r"rollout\.n must be >= 2"):
        compose_script("run_copo_qwen2.5_7b.sh", "actor_rollout_ref.rollout.n=1")


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("algorithm.copo.k=-1", r"algorithm\.copo\.k must be a finite number >= 0"),
        ("algorithm.copo.blend_mode=softer", "blend_mode"),
        ("algorithm.copo.entropy_source=answers", "entropy_source"),
        ("algorithm.copo.local_estimator=ppo", "local_estimator"),
        ("algorithm.copo.wrong_answer_global=zero", r"algorithm\.copo\.wrong_answer_global must be one of"),
        ("algorithm.gcpo.exact_max_g=21", "exact_max_g"),  # above copo_core.config.MAX_EXACT_G
        ("algorithm.gcpo.exact_max_g=-1", "exact_max_g"),
        ("trainer.use_v1=false", "use_v1"),
        ("algorithm.use_kl_in_reward=true", "use_kl_in_reward"),
        ("algorithm.rollout_correction.rollout_is=token", r"rollout_correction\.rollout_is=.*not supported"),
        (
            "algorithm.rollout_correction.rollout_rs=token_k1",
            r"rollout_correction\.rollout_rs=.*not supported",
        ),
        ("trainer.rollout_poll_interval_s=0", r"trainer\.rollout_poll_interval_s must be"),
        ("trainer.rollout_poll_interval_s=-0.5", r"trainer\.rollout_poll_interval_s must be"),
        ("trainer.rollout_poll_interval_s=fast", r"trainer\.rollout_poll_interval_s must be"),
        ("trainer.rollout_poll_interval_s=true", r"trainer\.rollout_poll_interval_s must be"),
    ],
)
def test_bad_values_fail(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compose_script("run_copo_qwen2.5_7b.sh", override)


def test_wrong_answer_global_variant_is_refused_with_local_only() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.copo\.wrong_answer_global=nonpositive"):
        compose_script(
            "run_copo_qwen2.5_7b.sh",
            "algorithm.copo.wrong_answer_global=nonpositive",
            "algorithm.copo.blend_mode=local_only",
        )


@pytest.mark.parametrize("local", ["drgrpo", "rloo", "gcpo"])
def test_each_local_estimator_and_the_variant_compose(local: str) -> None:
    config = compose_script(
        "run_copo_qwen2.5_7b.sh",
        f"algorithm.copo.local_estimator={local}",
        "algorithm.copo.wrong_answer_global=nonpositive",
    )
    assert config.algorithm.copo.local_estimator == local
    assert config.algorithm.copo.wrong_answer_global == "nonpositive"


def test_gcpo_estimator_needs_vanilla_loss() -> None:
    with pytest.raises(ConfigError, match="vanilla"):
        compose_script(
            "run_copo_qwen2.5_7b.sh",
            "algorithm.adv_estimator=gcpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode=copo",
        )


# --- cluster-path decisions the configs make (README "Run on a GPU cluster", docs/REPRODUCE.md) --------

GPU_CONFIGS = [p.name[len("run_") : -len(".sh")] for p in sorted(RECIPE.glob("run_*_qwen2.5_*.sh"))]


@pytest.mark.parametrize("config_name", GPU_CONFIGS)
def test_gpu_runs_use_fsdp2_save_where_they_validate_and_keep_few_checkpoints(config_name: str) -> None:
    c = compose_and_validate([], config_name=config_name)
    # FSDP2 for actor and reference, as the docs say (and as the CPU end-to-end tests run)
    assert c.actor_rollout_ref.actor.strategy == "fsdp2" and c.actor_rollout_ref.ref.strategy == "fsdp2"
    # ~90 GB per 7B checkpoint: keep 2, saved at the validated steps
    assert c.trainer.max_actor_ckpt_to_keep == 2
    assert c.trainer.save_freq == c.trainer.test_freq == 10 and c.trainer.val_before_train
    assert c.trainer.default_local_dir.startswith(PATHS["CKPT_DIR"] + "/")


def test_docs_and_configs_agree_on_the_engine() -> None:
    for doc in (REPO / "README.md", REPO / "docs" / "REPRODUCE.md"):
        text = doc.read_text()
        assert "FSDP2" in text and "fsdp2" in text, doc
        assert "FSDP1" not in text, f"{doc} names FSDP1, which no shipped GPU config runs"
