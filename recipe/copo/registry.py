"""The recipe's estimators and losses (``recipe/copo/estimators.py``: ``copo``, ``gcpo``) in verl's registries, for verl's own ``main_ppo``: each fails, pointing to main_copo.

COPO needs the extracted answers (reward extra info), two advantages per response and a two-term
clipped loss; GCPO needs response embeddings. A verl advantage estimator sees only rewards, mask and
uid and returns one tensor, and a registered policy loss receives one advantage, so neither can be
exact there. ``recipe.copo.main_copo`` does not use these registrations (its trainer computes the
step and installs the loss itself). Load them into plain ``verl.trainer.main_ppo`` with
``VERL_USE_EXTERNAL_MODULES=recipe.copo.registry``; without them verl reports an unknown name.
"""

from __future__ import annotations

from typing import Any, NoReturn

from verl.trainer.ppo.core_algos import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    register_adv_est,
    register_policy_loss,
)

from recipe.copo.estimators import ESTIMATOR_KEY, LOSS_KEY, RECIPE_ESTIMATORS, RECIPE_LOSS_MODES

MAIN_COPO_MESSAGE = (
    "{key}={name} runs only under the COPO trainer: launch `python -m recipe.copo.main_copo` (same Hydra "
    "overrides as verl.trainer.main_ppo). verl's {kind} cannot compute it exactly, so this recipe offers "
    "no approximation."
)


def _needs_main_copo(key: str, name: str, kind: str) -> Any:
    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError(MAIN_COPO_MESSAGE.format(key=key, name=name, kind=kind))

    fail.__name__ = f"{name}_needs_main_copo"
    return fail


_ENTRIES = (
    *(
        (ADV_ESTIMATOR_REGISTRY, register_adv_est, ESTIMATOR_KEY, name, "advantage estimators")
        for name in RECIPE_ESTIMATORS
    ),
    *(
        (POLICY_LOSS_REGISTRY, register_policy_loss, LOSS_KEY, name, "policy losses")
        for name in RECIPE_LOSS_MODES
    ),
)

for _registry, _register, _key, _name, _kind in _ENTRIES:
    if _name not in _registry:  # importing twice (or after another module took the name) changes nothing
        _register(_name)(_needs_main_copo(_key, _name, _kind))
