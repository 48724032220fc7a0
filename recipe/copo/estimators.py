"""Every advantage estimator the recipe offers, as one table: the only module that compares estimator names.

Two tables, one row per name:

* :data:`ESTIMATORS`, the values of ``algorithm.adv_estimator``: its policy loss (``loss_mode``), its config
  section, the driver-side step that computes it, its metric names and what that step reads from the batch.
* :data:`LOCAL_ESTIMATORS`, the values of ``algorithm.copo.local_estimator`` (COPO's local term, whose
  maths is ``copo_core.LOCAL_ADVANTAGES``): what its step reads from the batch beyond the rewards.

The step (``step.py``), the start-up checks (``config_check.py``), verl's registry (``registry.py``), the
trainer, the fast study trainer's settings and the study's methods read these rows; none of them spells
an estimator's name. Any other estimator verl knows (``rloo``, ``gae``, ...) runs verl's own step:
:func:`estimator` returns a ``verl`` row for it.

Adding an estimator: its ``copo_core`` function, its row here, its test (docs/ARCHITECTURE.md, "Adding an
estimator").

Usage::

    row = estimator(config.algorithm.adv_estimator)
    if row.step == RECIPE_STEP: ...          # recipe.copo.step.advantage_step computes it
    row.overrides()                           # ["algorithm.adv_estimator=copo", "...loss_mode=copo"]
"""

from __future__ import annotations

import dataclasses

from copo_core.config import LOCAL_ESTIMATORS as LOCAL_ESTIMATOR_NAMES
from copo_core.config import CopoConfig, GcpoConfig
from recipe.launch import format_overrides
from recipe.tracking import names

__all__ = [
    "COPO",
    "ESTIMATORS",
    "ESTIMATOR_KEY",
    "GCPO",
    "GRPO",
    "LOCAL_ESTIMATORS",
    "LOSS_KEY",
    "RECIPE_STEP",
    "VANILLA_LOSS",
    "VERL_STEP",
    "Estimator",
    "LocalEstimator",
    "estimator",
    "local_estimator",
]

ESTIMATOR_KEY = "algorithm.adv_estimator"
LOSS_KEY = "actor_rollout_ref.actor.policy_loss.loss_mode"
LOCAL_ESTIMATOR_KEY = f"{CopoConfig.SECTION}.local_estimator"
VANILLA_LOSS = "vanilla"  # verl's PPO clipped loss

# Driver-side steps: ``recipe.copo.step.advantage_step`` (the recipe's trainer calls it), or verl's own.
RECIPE_STEP = "recipe.copo.step.advantage_step"
VERL_STEP = "verl.trainer.ppo.ray_trainer.compute_advantage"

# StepBatch fields a step may read beyond scores, uids, keys, is_padding and response_mask.
PREDS = "preds"  # the reward's extracted answers (COPO's entropy with entropy_source=answer)
TEXTS = "texts"  # decoded responses (GCPO's embeddings)


@dataclasses.dataclass(frozen=True)
class Estimator:
    """One value of ``algorithm.adv_estimator``.

    Attributes:
        name: the value.
        loss_mode: the ``actor_rollout_ref.actor.policy_loss.loss_mode`` it pairs with (and only it).
        section: its config section (``algorithm.copo``), or None.
        step: the driver-side step: :data:`RECIPE_STEP` or :data:`VERL_STEP`.
        blends: the step blends a local and a global term (COPO's fields ``copo_*``); else the step's one
            advantage is GCPO's.
        metric_names: the names its step logs (``recipe/tracking/names.py``).
        batch_fields: StepBatch fields its step reads (``preds``: with ``entropy_source=answer`` only).
        gcpo_advantage: its step computes GCPO's advantage whatever the local estimator.
        fast: the fast study trainer runs it (``recipe/study/fast``).
    """

    name: str
    loss_mode: str
    section: str | None
    step: str
    blends: bool = False
    metric_names: tuple[str, ...] = (*names.SIGNAL_KEYS, *names.MECHANISM_KEYS)
    batch_fields: tuple[str, ...] = ()
    gcpo_advantage: bool = False
    fast: bool = False

    def overrides(self) -> list[str]:
        """The Hydra overrides that select it: the estimator and its loss."""
        return format_overrides({ESTIMATOR_KEY: self.name, LOSS_KEY: self.loss_mode})

    @property
    def recipe_step(self) -> bool:
        return self.step == RECIPE_STEP


@dataclasses.dataclass(frozen=True)
class LocalEstimator:
    """One value of ``algorithm.copo.local_estimator`` (COPO's local term; maths: ``copo_core.LOCAL_ADVANTAGES``).

    Attributes:
        name: the value.
        gcpo_advantage: the step replaces the local term with GCPO's advantage (needs ``texts``).
        metric_names: the names it adds to COPO's.
    """

    name: str
    gcpo_advantage: bool = False
    metric_names: tuple[str, ...] = ()

    @property
    def batch_fields(self) -> tuple[str, ...]:
        return (TEXTS,) if self.gcpo_advantage else ()


GRPO = Estimator(name="grpo", loss_mode=VANILLA_LOSS, section=None, step=VERL_STEP, fast=True)
COPO = Estimator(
    name="copo",
    loss_mode="copo",
    section=CopoConfig.SECTION,
    step=RECIPE_STEP,
    blends=True,
    metric_names=(*names.COPO_KEYS, *names.SIGNAL_KEYS, *names.MECHANISM_KEYS),
    batch_fields=(PREDS,),
    fast=True,
)
GCPO = Estimator(
    name="gcpo",
    loss_mode=VANILLA_LOSS,
    section=GcpoConfig.SECTION,
    step=RECIPE_STEP,
    metric_names=(*names.GCPO_KEYS, *names.SIGNAL_KEYS, *names.MECHANISM_KEYS),
    batch_fields=(TEXTS,),
    gcpo_advantage=True,
)
ESTIMATORS: dict[str, Estimator] = {row.name: row for row in (GRPO, COPO, GCPO)}

# A local term that reads only the rewards (grpo, drgrpo, rloo) needs no row of its own here: copo_core's
# LOCAL_ADVANTAGES computes it. A row is written only where the step must do more (gcpo: texts, embeddings).
_LOCAL_ROWS = (LocalEstimator(name="gcpo", gcpo_advantage=True, metric_names=names.GCPO_KEYS),)
LOCAL_ESTIMATORS: dict[str, LocalEstimator] = {
    name: next((row for row in _LOCAL_ROWS if row.name == name), LocalEstimator(name=name))
    for name in LOCAL_ESTIMATOR_NAMES
}

# The names the recipe's own step computes (verl's registry gets a stub for each: registry.py).
RECIPE_ESTIMATORS: tuple[str, ...] = tuple(name for name, row in ESTIMATORS.items() if row.recipe_step)
# Loss modes only the recipe provides (the actor workers get recipe.copo.actor_loss.copo_ppo_loss).
RECIPE_LOSS_MODES: tuple[str, ...] = tuple(
    dict.fromkeys(row.loss_mode for row in ESTIMATORS.values() if row.loss_mode != VANILLA_LOSS)
)


def estimator(name: str) -> Estimator:
    """The row of ``algorithm.adv_estimator=name``; a name the recipe does not offer is verl's own."""
    name = str(name)
    return ESTIMATORS.get(name) or Estimator(name=name, loss_mode=VANILLA_LOSS, section=None, step=VERL_STEP)


def local_estimator(name: str) -> LocalEstimator:
    """The row of ``algorithm.copo.local_estimator=name`` (the name is checked by ``CopoConfig``)."""
    return LOCAL_ESTIMATORS[str(name)]


def for_loss_mode(loss_mode: str) -> tuple[Estimator, ...]:
    """The recipe's estimators that pair with ``loss_mode``."""
    return tuple(row for row in ESTIMATORS.values() if row.loss_mode == str(loss_mode))
