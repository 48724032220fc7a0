"""Start-up validation of a composed COPO/GCPO config, and a compose-and-validate helper.

``validate_copo_config`` checks what verl cannot know about: the COPO estimator/loss pairing
(SPEC section 7), group size, and the ``algorithm.copo`` / ``algorithm.gcpo`` sections (built as
``copo_core.CopoConfig`` / ``GcpoConfig``, which hold every key's default and check).
``convert_verl_sections`` builds the dataclasses verl builds from the same YAML at run time
(actor, ref, rollout, critic, algorithm, reward, ...) so an unknown or ill-typed key fails here,
before any Ray worker starts. ``compose_and_validate`` does both on a list of Hydra overrides,
without launching anything (used by tests and by the cluster scripts).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from copo_core.config import ConfigError, CopoConfig, GcpoConfig
from recipe.copo.estimators import (
    COPO,
    ESTIMATOR_KEY,
    ESTIMATORS,
    GRPO,
    LOSS_KEY,
    RECIPE_LOSS_MODES,
    estimator,
    for_loss_mode,
)
from recipe.copo.throughput import check_throughput, resolve_attention

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config")

# verl's packaged configs (ppo_trainer.yaml and its groups) on Hydra's search path; given as an
# override because Hydra rejects hydra.searchpath in a non-primary config (see copo_trainer.yaml).
VERL_SEARCHPATH_OVERRIDE = "hydra.searchpath=[pkg://verl.trainer.config]"
__all__ = [
    "CONFIG_DIR",
    "ESTIMATOR_KEY",
    "LOSS_KEY",
    "compose",
    "compose_and_validate",
    "convert_verl_sections",
    "sections",
    "validate_copo_config",
    "with_verl_searchpath",
]


def with_verl_searchpath(overrides: Sequence[str]) -> list[str]:
    """``overrides`` plus the one that puts verl's packaged configs on Hydra's search path.

    A user-given ``hydra.searchpath`` is left alone (it must then include ``pkg://verl.trainer.config``).
    """
    if any(arg.lstrip("+").startswith("hydra.searchpath=") for arg in overrides):
        return list(overrides)
    return [*overrides, VERL_SEARCHPATH_OVERRIDE]


def sections(config: DictConfig) -> tuple[CopoConfig, GcpoConfig]:
    """The typed ``algorithm.copo`` and ``algorithm.gcpo`` sections; raises ConfigError naming the key."""
    return (
        CopoConfig.from_section(config.algorithm.get("copo")),
        GcpoConfig.from_section(config.algorithm.get("gcpo")),
    )


def validate_copo_config(config: DictConfig) -> None:
    """Check the COPO/GCPO parts of a composed config; raise ``ConfigError`` naming the key.

    Checks: estimator/loss pairing, ``rollout.n >= 2`` for group methods, ``algorithm.copo`` and
    ``algorithm.gcpo`` keys and values, the v1 trainer, options COPO's loss does not support, and the
    throughput settings (``recipe.copo.throughput.check_throughput``).
    """
    row = estimator(config.algorithm.adv_estimator)
    name = row.name
    loss_mode = str(config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla"))
    # A recipe estimator needs its loss, and a recipe loss its estimator's fields (estimators.py).
    if row.recipe_step and row.loss_mode != loss_mode:
        raise ConfigError(
            f"{ESTIMATOR_KEY}={name} needs {LOSS_KEY}={row.loss_mode}, got {LOSS_KEY}={loss_mode}. "
            f"Set both ({' '.join(row.overrides())}); for COPO's blend over another local estimator use "
            f"{' '.join(COPO.overrides())} algorithm.copo.local_estimator=<name>."
        )

    if loss_mode in RECIPE_LOSS_MODES and row.loss_mode != loss_mode:
        pairs = " or ".join(r.overrides()[0] for r in for_loss_mode(loss_mode))
        raise ConfigError(
            f"{LOSS_KEY}={loss_mode} needs {pairs}; got {ESTIMATOR_KEY}={name} and {LOSS_KEY}={loss_mode}. "
            f"Set both (e.g. {' '.join(for_loss_mode(loss_mode)[0].overrides())}), or neither "
            f"(e.g. {' '.join(GRPO.overrides())})."
        )
    sections(config)

    if row.recipe_step:
        n = config.actor_rollout_ref.rollout.n
        if not isinstance(n, int) or n < 2:
            raise ConfigError(
                f"actor_rollout_ref.rollout.n must be >= 2 for {ESTIMATOR_KEY}={name} (COPO/GCPO compare "
                f"responses inside a group), got {n!r}"
            )
        if not config.trainer.get("use_v1", True):
            raise ConfigError(
                f"{ESTIMATOR_KEY}={name} runs on verl's v1 trainer only; set trainer.use_v1=true "
                "(the legacy RayPPOTrainer is deprecated in verl 0.9.1)"
            )
        if config.algorithm.get("use_kl_in_reward", False):
            raise ConfigError(
                f"algorithm.use_kl_in_reward=true is not supported with {ESTIMATOR_KEY}={name} (the outcome "
                "reward must stay the verifier's score); use actor_rollout_ref.actor.use_kl_loss=true instead"
            )
        if config.algorithm.get("use_pf_ppo", False):
            raise ConfigError(f"algorithm.use_pf_ppo=true is not supported with {ESTIMATOR_KEY}={name}")
        # verl computes importance weights / rejection masks in its own advantage step, which the COPO/GCPO
        # step replaces; ignoring them silently would train a different objective than the config says.
        rollout_corr = config.algorithm.get("rollout_correction") or {}
        for key in ("rollout_is", "rollout_rs"):
            if rollout_corr.get(key) is not None:
                raise ConfigError(
                    f"algorithm.rollout_correction.{key}={rollout_corr.get(key)!r} is not supported with "
                    f"{ESTIMATOR_KEY}={name} (the COPO/GCPO advantage step does not compute rollout "
                    f"importance weights or rejection masks); set algorithm.rollout_correction.{key}=null"
                )
    if loss_mode in RECIPE_LOSS_MODES:
        rollout_corr = config.algorithm.get("rollout_correction") or {}
        if rollout_corr.get("bypass_mode", False) and rollout_corr.get("loss_type", "ppo_clip") != "ppo_clip":
            raise ConfigError(
                "algorithm.rollout_correction.loss_type must be ppo_clip with COPO's loss "
                f"(got {rollout_corr.get('loss_type')!r})"
            )
        if config.get("distillation") is not None and config.distillation.get("enabled", False):
            raise ConfigError("distillation.enabled=true is not supported with COPO's loss")

    check_throughput(config)
    checkpoint = config.actor_rollout_ref.actor.get("checkpoint") or {}
    if checkpoint.get("async_save", False):
        raise ConfigError(
            "actor_rollout_ref.actor.checkpoint.async_save=true is not supported: the trainer seals a checkpoint "
            "(recipe/copo/checkpoint_guard.py) only once it is completely written; set it to false"
        )
    jsonl = config.trainer.get("metrics_jsonl")
    if jsonl is not None and not isinstance(jsonl, str):
        raise ConfigError(f"trainer.metrics_jsonl must be a path, empty or null; got {jsonl!r}")
    poll = config.trainer.get("rollout_poll_interval_s")
    if poll is not None and (
        isinstance(poll, bool) or not isinstance(poll, (int, float)) or not 0 < poll <= 60
    ):
        raise ConfigError(
            f"trainer.rollout_poll_interval_s must be a number of seconds in (0, 60] or null (verl's 2.0); got {poll!r}"
        )


def _ref_section_as_worker_sees_it(config: DictConfig) -> DictConfig:
    """The ref section after verl's ActorRolloutRefWorker.init_model renames its keys."""
    ref = copy.deepcopy(config.actor_rollout_ref.ref)
    with open_dict(ref):
        ref.ppo_mini_batch_size = config.actor_rollout_ref.actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    return ref


def convert_verl_sections(config: DictConfig) -> dict[str, Any]:
    """Build the dataclasses verl 0.9.1 builds from this config (unknown keys raise here).

    The model sections (``HFModelConfig``) are not built: that loads the tokenizer from
    ``model.path``. Returns the built objects by dotted section name.
    """
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass

    built: dict[str, Any] = {}
    arr = config.actor_rollout_ref
    built["actor_rollout_ref.actor"] = omega_conf_to_dataclass(arr.actor)
    if need_reference_policy(config):
        built["actor_rollout_ref.ref"] = omega_conf_to_dataclass(_ref_section_as_worker_sees_it(config))
    built["actor_rollout_ref.rollout"] = omega_conf_to_dataclass(arr.rollout)
    built["actor_rollout_ref.rollout.checkpoint_engine"] = omega_conf_to_dataclass(
        arr.rollout.checkpoint_engine
    )
    if need_critic(config):
        critic = copy.deepcopy(config.critic)
        with open_dict(critic):
            critic.pop("model", None)  # HFModelConfig would load the tokenizer
        built["critic"] = omega_conf_to_dataclass(critic)
    # verl reads `algorithm` as a DictConfig; build AlgoConfig from everything but the recipe's keys
    # so typos in verl's own algorithm keys still fail.
    algo = OmegaConf.to_container(config.algorithm, resolve=True)
    recipe_sections = [row.section.rsplit(".", 1)[-1] for row in ESTIMATORS.values() if row.section]
    for key in (*recipe_sections, "_target_"):
        algo.pop(key, None)
    built["algorithm"] = omega_conf_to_dataclass(algo, dataclass_type=AlgoConfig)
    # (verl 0.9.1 never builds `reward` as one dataclass: its RewardManagerConfig target fails to
    # instantiate on its own; likewise `global_profiler`. Both are left to verl.)
    if config.get("skip") is not None:
        from verl.utils.skip import SkipManagerConfig

        built["skip"] = omega_conf_to_dataclass(config.skip, dataclass_type=SkipManagerConfig)
    if config.get("distillation") is not None:
        built["distillation"] = omega_conf_to_dataclass(config.distillation)
    return built


def compose(overrides: Sequence[str] = (), config_name: str = "copo_trainer") -> DictConfig:
    """Compose ``recipe/copo/config/<config_name>.yaml`` with Hydra overrides (nothing is launched)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose(config_name=config_name, overrides=with_verl_searchpath(overrides))


def compose_and_validate(overrides: Sequence[str] = (), config_name: str = "copo_trainer") -> DictConfig:
    """Compose the recipe config with ``overrides``, build verl's dataclasses and validate.

    Raises Hydra's error for an unknown key on the command line, verl's error for a bad verl key
    or value, and ``ConfigError`` for a COPO/GCPO problem. Returns the composed config, with
    ``auto`` attention resolved for this machine as ``main_copo`` resolves it.
    """
    config = compose(overrides, config_name=config_name)
    resolve_attention(config)
    validate_copo_config(config)
    convert_verl_sections(config)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    return config
