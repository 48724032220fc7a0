"""What a fast run reads from the composed verl config: the keys ``main_copo`` trains with, checked once.

The fast trainer runs one PPO update per step over the whole step batch, on policy, without KL or
entropy terms: the controlled study's workload. A config asking for anything else (several
mini-batches or epochs, a KL loss, an estimator other than GRPO or COPO) is refused with the key
that would have to change, rather than trained differently from what ``main_copo`` would do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from recipe.copo.estimators import ESTIMATORS, Estimator, estimator
from recipe.copo.step import StepSettings
from recipe.study.fast.budget import SampleBudget

# The estimators the fast trainer runs: the rows of recipe/copo/estimators.py marked ``fast``.
FAST_ESTIMATORS: tuple[str, ...] = tuple(name for name, row in ESTIMATORS.items() if row.fast)
FILTER_METRICS = ("acc", "score")


class FastConfigError(ValueError):
    """A config the fast trainer cannot run as verl would; the message names the key."""


def _refuse(key: str, value: Any, why: str) -> FastConfigError:
    return FastConfigError(f"{key}={value!r}: {why} (recipe/study/fast/settings.py)")


@dataclasses.dataclass(frozen=True)
class FastSettings:
    """A fast run's settings (field: the verl key it comes from).

    Attributes:
        estimator: ``algorithm.adv_estimator`` (grpo or copo).
        step: COPO's step settings (``algorithm.copo``, ``algorithm.norm_adv_by_std_in_grpo``); None for GRPO.
        norm_adv_by_std: ``algorithm.norm_adv_by_std_in_grpo``.
        batch_size: ``data.train_batch_size`` prompts per step (= ``actor.ppo_mini_batch_size``).
        n: ``actor_rollout_ref.rollout.n`` responses per prompt.
        temperature, top_p, top_k: ``actor_rollout_ref.rollout.*`` sampling of training rollouts.
        max_response_length: ``data.max_response_length``.
        max_prompt_length: ``data.max_prompt_length`` (a longer prompt is an error, as verl's ``truncation: error``).
        val_n, val_temperature, val_top_p, val_top_k, val_do_sample: ``actor_rollout_ref.rollout.val_kwargs.*``.
        steps: ``trainer.total_training_steps``.
        test_freq: ``trainer.test_freq`` (validation every this many steps, and after the last step).
        val_before_train: ``trainer.val_before_train``.
        data_seed: ``data.seed`` (training data order). rollout_seed: ``actor_rollout_ref.rollout.seed``.
        shuffle: ``data.shuffle``.
        filter_groups: ``algorithm.filter_groups.enable`` (DAPO's dynamic sampling).
        filter_metric: ``algorithm.filter_groups.metric``.
        max_inflight_gen_batches: ``algorithm.filter_groups.max_inflight_gen_batches``.
        reuse_rollout_log_probs: ``algorithm.rollout_correction.bypass_mode`` (old log-probs are the
            rollout's; else the actor recomputes them before the update).
        actor: verl's ``ActorConfig`` (clip ratios, ``loss_agg_mode``, ``optim``), as the actor workers build it.
        budget_in_samples: ``fast.budget_in_samples``, this project's key (not verl's; absent: false): read
            ``steps`` and ``test_freq`` in generated samples (:mod:`recipe.study.fast.budget`), so that DAPO's
            filter is compute-matched. Given as ``+fast.budget_in_samples=true``; only the fast trainer reads it.
    """

    estimator: str
    step: StepSettings | None
    norm_adv_by_std: bool
    batch_size: int
    n: int
    temperature: float
    top_p: float
    top_k: int
    max_response_length: int
    max_prompt_length: int
    val_n: int
    val_temperature: float
    val_top_p: float
    val_top_k: int
    val_do_sample: bool
    steps: int
    test_freq: int
    val_before_train: bool
    data_seed: int
    rollout_seed: int
    shuffle: bool
    filter_groups: bool
    filter_metric: str
    max_inflight_gen_batches: int
    reuse_rollout_log_probs: bool
    actor: Any = dataclasses.field(compare=False, repr=False)
    budget_in_samples: bool = False

    @property
    def sample_budget(self) -> SampleBudget | None:
        """The budget in generated samples, or None when the run's budget is in steps (the default)."""
        if not self.budget_in_samples:
            return None
        return SampleBudget(per_step=self.batch_size * self.n, steps=self.steps, test_freq=self.test_freq)

    @property
    def row(self) -> Estimator:
        """The estimator's row (recipe/copo/estimators.py)."""
        return estimator(self.estimator)

    @property
    def loss_mode(self) -> str:
        return self.row.loss_mode

    @classmethod
    def from_config(cls, config: DictConfig) -> FastSettings:
        """From a composed ``main_copo`` config (``recipe.copo.config_check.compose``).

        Raises:
            FastConfigError: a setting the fast trainer does not run as verl would, naming the key.
        """
        from verl.utils.config import omega_conf_to_dataclass

        algorithm, data, trainer = config.algorithm, config.data, config.trainer
        rollout, actor_node = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor
        row = estimator(algorithm.adv_estimator)
        if not row.fast:
            raise _refuse(
                "algorithm.adv_estimator", row.name, f"the fast trainer runs {sorted(FAST_ESTIMATORS)}"
            )
        loss_mode = str(actor_node.policy_loss.get("loss_mode", "vanilla"))
        if loss_mode != row.loss_mode:
            raise _refuse(
                "actor_rollout_ref.actor.policy_loss.loss_mode",
                loss_mode,
                f"adv_estimator={row.name} pairs with loss_mode={row.loss_mode}",
            )
        if int(actor_node.ppo_mini_batch_size) != int(data.train_batch_size):
            raise _refuse(
                "actor_rollout_ref.actor.ppo_mini_batch_size",
                int(actor_node.ppo_mini_batch_size),
                f"the fast trainer makes one update per step over the whole batch: set it to "
                f"data.train_batch_size={int(data.train_batch_size)}",
            )
        if int(actor_node.ppo_epochs) != 1:
            raise _refuse("actor_rollout_ref.actor.ppo_epochs", int(actor_node.ppo_epochs), "must be 1")
        if bool(actor_node.use_kl_loss):
            raise _refuse("actor_rollout_ref.actor.use_kl_loss", True, "no KL term in the fast trainer")
        if float(actor_node.entropy_coeff) != 0.0 or bool(actor_node.get("calculate_entropy", False)):
            raise _refuse(
                "actor_rollout_ref.actor.entropy_coeff", float(actor_node.entropy_coeff), "must be 0"
            )
        if bool(algorithm.use_kl_in_reward):
            raise _refuse("algorithm.use_kl_in_reward", True, "no KL penalty in the fast trainer")
        correction = algorithm.get("rollout_correction") or {}
        if correction.get("rollout_is") or correction.get("rollout_rs"):
            raise _refuse(
                "algorithm.rollout_correction.rollout_is",
                correction.get("rollout_is"),
                "no IS weights in the fast trainer",
            )
        if int(rollout.n) < 2:
            raise _refuse("actor_rollout_ref.rollout.n", int(rollout.n), "group methods need >= 2 responses")
        filter_node = algorithm.get("filter_groups") or {}
        filter_groups = bool(filter_node.get("enable", False))
        filter_metric = str(filter_node.get("metric", "acc"))
        if filter_groups and filter_metric not in FILTER_METRICS:
            raise _refuse("algorithm.filter_groups.metric", filter_metric, f"choose one of {FILTER_METRICS}")
        if rollout.get("seed") is None or data.get("seed") is None:
            raise _refuse("data.seed / actor_rollout_ref.rollout.seed", None, "a fast run needs both seeds")
        val = rollout.val_kwargs
        actor = omega_conf_to_dataclass(actor_node)
        budget_in_samples = _budget_in_samples(config)
        return cls(
            estimator=row.name,
            step=StepSettings.from_config(config) if row.recipe_step else None,
            norm_adv_by_std=bool(algorithm.get("norm_adv_by_std_in_grpo", True)),
            batch_size=int(data.train_batch_size),
            n=int(rollout.n),
            temperature=float(rollout.temperature),
            top_p=float(rollout.top_p),
            top_k=int(rollout.top_k),
            max_response_length=int(data.max_response_length),
            max_prompt_length=int(data.max_prompt_length),
            val_n=int(val.n),
            val_temperature=float(val.temperature),
            val_top_p=float(val.top_p),
            val_top_k=int(val.top_k),
            val_do_sample=bool(val.do_sample),
            steps=int(trainer.total_training_steps),
            test_freq=int(trainer.test_freq),
            val_before_train=bool(trainer.get("val_before_train", True)),
            data_seed=int(data.seed),
            rollout_seed=int(rollout.seed),
            shuffle=bool(data.get("shuffle", True)),
            filter_groups=filter_groups,
            filter_metric=filter_metric,
            max_inflight_gen_batches=int(filter_node.get("max_inflight_gen_batches", 1)),
            reuse_rollout_log_probs=bool(correction.get("bypass_mode", False)),
            actor=actor,
            budget_in_samples=budget_in_samples,
        )


FAST_KEYS = ("budget_in_samples",)  # the project's ``fast`` section: keys the fast trainer reads


def _budget_in_samples(config: DictConfig) -> bool:
    """``fast.budget_in_samples`` (absent: false); a typo'd key or a non-boolean is refused, not ignored."""
    node = config.get("fast") or {}
    unknown = sorted(set(node) - set(FAST_KEYS))
    if unknown:
        raise _refuse(
            f"fast.{unknown[0]}", node[unknown[0]], f"the fast section's keys are {list(FAST_KEYS)}"
        )
    value = node.get("budget_in_samples", False)
    if not isinstance(value, bool):
        raise _refuse("fast.budget_in_samples", value, "must be true or false")
    return value


def load_config(path: str) -> DictConfig:
    """A composed config saved with ``OmegaConf.save`` (the study writes one per run)."""
    config = OmegaConf.load(path)
    assert isinstance(config, DictConfig)
    return config
