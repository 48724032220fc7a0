"""Start-up validation of a composed COPO/GCPO config, and a compose-and-validate helper.

``validate_copo_config`` checks what verl cannot know about: the COPO estimator/loss pairing
(SPEC section 7), group size, the ``algorithm.copo`` / ``algorithm.gcpo`` keys and their values.
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

from copo_core import BLEND_MODES, ENTROPY_SOURCES
from copo_core.gcpo import MAX_EXACT_G
from recipe.copo.registry import COPO_DEFAULTS

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config")

LOCAL_ESTIMATORS = ("grpo", "gcpo")
GCPO_DEFAULTS: dict[str, Any] = {
    "alpha": 1.0,
    "beta": 1.0,
    "exact_max_g": 10,
    "num_permutations": 64,
    "seed": 0,
    "embedder": "minilm",
    "embed_batch_size": 64,
}
# verl's packaged configs (ppo_trainer.yaml and its groups) on Hydra's search path; given as an
# override because Hydra rejects hydra.searchpath in a non-primary config (see copo_trainer.yaml).
VERL_SEARCHPATH_OVERRIDE = "hydra.searchpath=[pkg://verl.trainer.config]"
ESTIMATOR_KEY = "algorithm.adv_estimator"
LOSS_KEY = "actor_rollout_ref.actor.policy_loss.loss_mode"


class CopoConfigError(ValueError):
    """A COPO/GCPO config problem; the message names the key and how to fix it."""


def uses_copo(config: DictConfig) -> bool:
    """True when the run selects COPO (estimator and loss both ``copo``)."""
    return str(config.algorithm.adv_estimator) == "copo"


def uses_gcpo(config: DictConfig) -> bool:
    """True when GCPO's advantage is needed (as the estimator or as COPO's local term)."""
    if str(config.algorithm.adv_estimator) == "gcpo":
        return True
    copo = config.algorithm.get("copo") or {}
    return uses_copo(config) and str(copo.get("local_estimator", "grpo")) == "gcpo"


def _check_known_keys(section: Any, known: dict[str, Any], name: str) -> None:
    unknown = sorted(set(section.keys()) - set(known))
    if unknown:
        raise CopoConfigError(
            f"unknown key(s) {', '.join(f'{name}.{key}' for key in unknown)}; known keys: "
            f"{', '.join(sorted(known))} (check the spelling; see recipe/copo/config/copo_trainer.yaml)"
        )


def _number(section: Any, key: str, name: str) -> float:
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CopoConfigError(f"{name}.{key} must be a number, got {value!r}")
    return float(value)


def _integer(section: Any, key: str, name: str, minimum: int, maximum: int | None = None) -> int:
    value = section.get(key)
    bad = isinstance(value, bool) or not isinstance(value, int) or value < minimum
    if bad or (maximum is not None and value > maximum):
        bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise CopoConfigError(f"{name}.{key} must be an integer {bounds}, got {value!r}")
    return value


def _check_copo_section(copo: Any) -> None:
    name = "algorithm.copo"
    _check_known_keys(copo, COPO_DEFAULTS, name)
    k = _number(copo, "k", name)
    if k < 0:
        raise CopoConfigError(f"{name}.k must be >= 0 (gate sharpness), got {k}")
    _number(copo, "b", name)
    if copo.get("blend_mode") not in BLEND_MODES:
        raise CopoConfigError(
            f"{name}.blend_mode={copo.get('blend_mode')!r} is not a known mode; use one of {', '.join(BLEND_MODES)}"
        )
    if copo.get("entropy_source") not in ENTROPY_SOURCES:
        raise CopoConfigError(
            f"{name}.entropy_source={copo.get('entropy_source')!r} is not known; use 'answer' or 'reward'"
        )
    if not isinstance(copo.get("entropy_penalty"), bool):
        raise CopoConfigError(
            f"{name}.entropy_penalty must be true or false, got {copo.get('entropy_penalty')!r}"
        )
    if copo.get("local_estimator") not in LOCAL_ESTIMATORS:
        raise CopoConfigError(
            f"{name}.local_estimator={copo.get('local_estimator')!r} is not known; use 'grpo' or 'gcpo'"
        )


def _check_gcpo_section(gcpo: Any) -> None:
    name = "algorithm.gcpo"
    _check_known_keys(gcpo, GCPO_DEFAULTS, name)
    if _number(gcpo, "alpha", name) <= 0:
        raise CopoConfigError(f"{name}.alpha must be > 0, got {gcpo.get('alpha')!r}")
    _number(gcpo, "beta", name)
    # Exact Shapley costs ~G * 2^G per group; larger groups must use Monte Carlo.
    _integer(gcpo, "exact_max_g", name, 0, MAX_EXACT_G)
    _integer(gcpo, "num_permutations", name, 1)
    _integer(gcpo, "seed", name, 0)
    _integer(gcpo, "embed_batch_size", name, 1)
    embedder = gcpo.get("embedder")
    if not isinstance(embedder, str) or not embedder:
        raise CopoConfigError(
            f"{name}.embedder must be a local model path, 'minilm', 'hash' or 'policy_hidden'; got {embedder!r}"
        )


def validate_copo_config(config: DictConfig) -> None:
    """Check the COPO/GCPO parts of a composed config; raise ``CopoConfigError`` naming the key.

    Checks: estimator/loss pairing, ``rollout.n >= 2`` for group methods, ``algorithm.copo`` and
    ``algorithm.gcpo`` keys and values, the v1 trainer, and options COPO's loss does not support.
    """
    estimator = str(config.algorithm.adv_estimator)
    loss_mode = str(config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla"))
    if (estimator == "copo") != (loss_mode == "copo"):
        raise CopoConfigError(
            f"COPO needs both {ESTIMATOR_KEY}=copo and {LOSS_KEY}=copo; got {ESTIMATOR_KEY}={estimator} and "
            f"{LOSS_KEY}={loss_mode}. Set both to copo, or neither (e.g. grpo + vanilla)."
        )
    if estimator == "gcpo" and loss_mode != "vanilla":
        raise CopoConfigError(
            f"{ESTIMATOR_KEY}=gcpo uses verl's vanilla loss, got {LOSS_KEY}={loss_mode}. For COPO with GCPO's "
            f"local term use {ESTIMATOR_KEY}=copo {LOSS_KEY}=copo algorithm.copo.local_estimator=gcpo."
        )

    copo = config.algorithm.get("copo")
    if copo is None:
        raise CopoConfigError(
            "algorithm.copo is missing; compose the config from recipe/copo/config/copo_trainer.yaml"
        )
    _check_copo_section(copo)
    gcpo = config.algorithm.get("gcpo")
    if gcpo is None:
        raise CopoConfigError(
            "algorithm.gcpo is missing; compose the config from recipe/copo/config/copo_trainer.yaml"
        )
    _check_gcpo_section(gcpo)

    if estimator in ("copo", "gcpo"):
        n = config.actor_rollout_ref.rollout.n
        if not isinstance(n, int) or n < 2:
            raise CopoConfigError(
                f"actor_rollout_ref.rollout.n must be >= 2 for {ESTIMATOR_KEY}={estimator} (COPO/GCPO compare "
                f"responses inside a group), got {n!r}"
            )
        if not config.trainer.get("use_v1", True):
            raise CopoConfigError(
                f"{ESTIMATOR_KEY}={estimator} runs on verl's v1 trainer only; set trainer.use_v1=true "
                "(the legacy RayPPOTrainer is deprecated in verl 0.9.1)"
            )
        if config.algorithm.get("use_kl_in_reward", False):
            raise CopoConfigError(
                f"algorithm.use_kl_in_reward=true is not supported with {ESTIMATOR_KEY}={estimator} (the outcome "
                "reward must stay the verifier's score); use actor_rollout_ref.actor.use_kl_loss=true instead"
            )
        if config.algorithm.get("use_pf_ppo", False):
            raise CopoConfigError(
                f"algorithm.use_pf_ppo=true is not supported with {ESTIMATOR_KEY}={estimator}"
            )
    if estimator == "copo":
        rollout_corr = config.algorithm.get("rollout_correction") or {}
        if rollout_corr.get("bypass_mode", False) and rollout_corr.get("loss_type", "ppo_clip") != "ppo_clip":
            raise CopoConfigError(
                "algorithm.rollout_correction.loss_type must be ppo_clip with COPO's loss "
                f"(got {rollout_corr.get('loss_type')!r})"
            )
        if config.get("distillation") is not None and config.distillation.get("enabled", False):
            raise CopoConfigError("distillation.enabled=true is not supported with COPO's loss")

    jsonl = config.trainer.get("metrics_jsonl")
    if jsonl is not None and not isinstance(jsonl, str):
        raise CopoConfigError(f"trainer.metrics_jsonl must be a path, empty or null; got {jsonl!r}")


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
    for key in ("copo", "gcpo", "_target_"):
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
    overrides = list(overrides)
    if not any(o.lstrip("+").startswith("hydra.searchpath=") for o in overrides):
        overrides.append(VERL_SEARCHPATH_OVERRIDE)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose(config_name=config_name, overrides=overrides)


def compose_and_validate(overrides: Sequence[str] = (), config_name: str = "copo_trainer") -> DictConfig:
    """Compose the recipe config with ``overrides``, build verl's dataclasses and validate.

    Raises Hydra's error for an unknown key on the command line, verl's error for a bad verl key
    or value, and ``CopoConfigError`` for a COPO/GCPO problem. Returns the composed config.
    """
    config = compose(overrides, config_name=config_name)
    validate_copo_config(config)
    convert_verl_sections(config)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    return config
