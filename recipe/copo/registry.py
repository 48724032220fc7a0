"""Names the recipe adds to verl's registries: ``copo`` (estimator and loss) and ``gcpo`` (estimator).

Importing this module registers them; it is idempotent. What each registration can and cannot do:

* ``copo`` advantage estimator: verl's registered estimators only see rewards, mask, uid and the
  algorithm config, and must return ONE advantage tensor. Used alone (``verl.trainer.main_ppo``
  with ``algorithm.adv_estimator=copo`` and verl's ``vanilla`` loss) it gives a single-tensor
  *approximation* of COPO: ``w * A_local + (1 - w) * A_global`` with the consistency entropy taken
  over reward classes (no extracted answers reach an estimator). The exact COPO loss applies the
  PPO clip to the two advantages separately; use ``python -m recipe.copo.main_copo`` for that.
* ``copo`` policy loss: a registered policy loss receives one advantage tensor, so it cannot be
  COPO's two-term loss. It exists so the name resolves; called, it raises and points to main_copo,
  whose trainer installs :func:`recipe.copo.actor_loss.copo_ppo_loss` on the workers instead.
* ``gcpo`` advantage estimator: needs response embeddings, which an estimator cannot compute.
  It raises and points to main_copo.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    register_adv_est,
    register_policy_loss,
)

from copo_core import compute_copo_advantages

logger = logging.getLogger(__name__)

COPO_NAME = "copo"
GCPO_NAME = "gcpo"

# Defaults of `algorithm.copo` (SPEC section 7); the YAML declares the same values.
COPO_DEFAULTS: dict[str, Any] = {
    "k": 5.0,
    "b": 1.0,
    "blend_mode": "soft_with_zero",
    "entropy_source": "answer",
    "entropy_penalty": False,
    "local_estimator": "grpo",
}

_APPROX_WARNING = (
    "algorithm.adv_estimator=copo is running as a plain verl advantage estimator: this is the "
    "single-tensor approximation w*A_local + (1-w)*A_global with entropy over reward classes, not "
    "SPEC's COPO loss. Launch `python -m recipe.copo.main_copo` for exact COPO."
)
_warned = False


def _algo_get(config: Any, key: str, default: Any) -> Any:
    """Read ``key`` from a DictConfig, dict or dataclass algorithm config."""
    if config is None:
        return default
    if hasattr(config, "get"):
        try:
            return config.get(key, default)
        except Exception:  # noqa: BLE001 - structured configs raise on unknown keys
            return default
    return getattr(config, key, default)


def compute_copo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-tensor approximation of COPO for use as a plain verl advantage estimator.

    Args:
        token_level_rewards: (N, L) rewards; the outcome reward is their sum over L.
        response_mask: (N, L) 1 for response tokens.
        index: (N,) prompt ids (verl's ``uid``).
        epsilon: added to std, as verl's grpo.
        config: verl's ``algorithm`` config; COPO keys are read from ``config.copo``.

    Returns:
        (advantages, returns), both (N, L): ``w * A_local + (1 - w) * A_global`` broadcast over the
        response tokens. This is NOT the exact COPO loss (the clip is applied to the blended
        advantage rather than to each term) and the entropy is over reward classes because an
        estimator never sees the extracted answers. Use ``recipe.copo.main_copo`` for exact COPO.
    """
    global _warned
    if not _warned:
        warnings.warn(_APPROX_WARNING, stacklevel=2)
        logger.warning(_APPROX_WARNING)
        _warned = True
    copo_cfg = _algo_get(config, "copo", None) or {}
    params = {key: _algo_get(copo_cfg, key, default) for key, default in COPO_DEFAULTS.items()}
    scores = token_level_rewards.sum(dim=-1)
    adv = compute_copo_advantages(
        scores,
        list(index),
        None,
        k=float(params["k"]),
        b=float(params["b"]),
        blend_mode=str(params["blend_mode"]),
        entropy_source="reward",
        entropy_penalty=bool(params["entropy_penalty"]),
        norm_adv_by_std=bool(_algo_get(config, "norm_adv_by_std_in_grpo", True)),
        eps=epsilon,
    )
    blended = adv.blended.to(response_mask.dtype if response_mask.is_floating_point() else torch.float32)
    advantages = blended.unsqueeze(-1) * response_mask
    return advantages, advantages


def copo_policy_loss_placeholder(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, dict[str, Any]]:
    """Placeholder for ``policy_loss.loss_mode=copo`` in verl's own ``ppo_loss``: always raises.

    verl's registered losses receive a single advantage tensor; COPO needs the local and global
    advantages and the per-response weight, which only ``recipe.copo.main_copo`` provides.
    """
    raise RuntimeError(
        "actor_rollout_ref.actor.policy_loss.loss_mode=copo needs the COPO trainer: launch "
        "`python -m recipe.copo.main_copo` (it installs recipe.copo.actor_loss.copo_ppo_loss on the "
        "actor workers). With verl's own main_ppo use loss_mode=vanilla and adv_estimator=copo for "
        "the single-tensor approximation."
    )


def compute_gcpo_advantage_placeholder(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Placeholder for ``algorithm.adv_estimator=gcpo`` outside main_copo: always raises."""
    raise RuntimeError(
        "algorithm.adv_estimator=gcpo needs response embeddings, which a verl advantage estimator "
        "never sees: launch `python -m recipe.copo.main_copo algorithm.adv_estimator=gcpo "
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla`."
    )


def _register(registry: dict[str, Any], name: str, fn: Any, decorator: Any) -> None:
    """Register ``fn`` under ``name`` unless another module already owns that name."""
    existing = registry.get(name)
    if existing is None:
        decorator(name)(fn)
    elif existing is not fn and getattr(existing, "__module__", None) == fn.__module__:
        registry[name] = fn  # this module was re-imported: replace our own stale entry
    elif existing is not fn:
        logger.warning("verl already has %r registered by %s; leaving it", name, existing.__module__)


def register_all() -> None:
    """Register ``copo`` (estimator + loss) and ``gcpo`` (estimator) in verl; safe to call twice."""
    _register(ADV_ESTIMATOR_REGISTRY, COPO_NAME, compute_copo_outcome_advantage, register_adv_est)
    _register(ADV_ESTIMATOR_REGISTRY, GCPO_NAME, compute_gcpo_advantage_placeholder, register_adv_est)
    _register(POLICY_LOSS_REGISTRY, COPO_NAME, copo_policy_loss_placeholder, register_policy_loss)


register_all()
