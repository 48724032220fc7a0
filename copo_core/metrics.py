"""Per-step batch statistics: COPO's (logged under ``copo/``) and the signal budget of any estimator
(logged under ``signal/``). The group outcome fractions live in the signal budget only."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

from copo_core.advantages import CopoAdvantages
from copo_core.grouping import check_step_batch, group_inverse, group_reduce

__all__ = [
    "COPO_METRIC_KEYS",
    "NONZERO_ADV_TOL",
    "SIGNAL_METRIC_KEYS",
    "copo_batch_metrics",
    "signal_budget_metrics",
]

# |advantage| above this counts as a learning signal in ``frac_nonzero_adv``.
NONZERO_ADV_TOL = 1e-8

# The keys these functions return; the recipe logs them under ``copo/`` and ``signal/``
# (recipe/tracking/names.py builds the logged names from these).
ENTROPY_MEAN = "entropy_mean"
ENTROPY_MIN = "entropy_min"
ENTROPY_MAX = "entropy_max"
LOCAL_WEIGHT_MEAN = "local_weight_mean"
GLOBAL_ADV_MEAN = "global_adv_mean"
GLOBAL_ADV_STD = "global_adv_std"
FRAC_NONZERO_ADV = "frac_nonzero_adv"
PROMPT_REWARD_MEAN = "prompt_reward_mean"
COPO_METRIC_KEYS = (
    ENTROPY_MEAN,
    ENTROPY_MIN,
    ENTROPY_MAX,
    LOCAL_WEIGHT_MEAN,
    GLOBAL_ADV_MEAN,
    GLOBAL_ADV_STD,
    FRAC_NONZERO_ADV,
    PROMPT_REWARD_MEAN,
)
FRAC_GROUPS_ALL_CORRECT = "frac_groups_all_correct"
FRAC_GROUPS_ALL_WRONG = "frac_groups_all_wrong"
FRAC_GROUPS_ZERO_VARIANCE = "frac_groups_zero_variance"
NUM_RESPONSES = "num_responses"
NUM_GROUPS = "num_groups"
SIGNAL_METRIC_KEYS = (
    FRAC_NONZERO_ADV,
    FRAC_GROUPS_ALL_CORRECT,
    FRAC_GROUPS_ALL_WRONG,
    FRAC_GROUPS_ZERO_VARIANCE,
    NUM_RESPONSES,
    NUM_GROUPS,
)


@torch.no_grad()
def copo_batch_metrics(
    adv: CopoAdvantages, index: Sequence[Hashable] | np.ndarray | torch.Tensor | None = None
) -> dict[str, float]:
    """COPO's statistics of one training step.

    Per-prompt statistics (entropy, global advantage, prompt reward) are taken over the P prompts,
    each prompt once; ``local_weight_mean`` and ``frac_nonzero_adv`` are over the N responses. The
    group outcome fractions (all correct, all wrong, zero variance) are in ``signal_budget_metrics``.

    Args:
        adv: output of ``compute_copo_advantages`` for this batch (possibly with another local term).
        index: length-N prompt ids or the (N,) int64 group inverse; default ``adv.group_index``.

    Returns:
        python floats: ``entropy_mean``/``_min``/``_max`` (bits), ``local_weight_mean``,
        ``global_adv_mean``, ``global_adv_std`` (unbiased, 0 for one prompt), ``frac_nonzero_adv``
        (``|w A^L + (1-w) A^G| > 1e-8``), ``prompt_reward_mean``.
    """
    n = adv.local_adv.shape[0]
    if index is None:
        if adv.group_index is None:
            raise ValueError("`index` is required when `adv.group_index` is None")
        gidx, n_groups = adv.group_index, int(adv.num_groups or int(adv.group_index.max()) + 1)
    else:
        if len(index) != n:
            raise ValueError(f"`index` has length {len(index)} but `adv` has {n} responses")
        gidx, n_groups = group_inverse(index, device=adv.local_adv.device)
    gidx = gidx.to(adv.local_adv.device)

    # First response of each group carries the group's per-prompt values.
    first = torch.full((n_groups,), n, dtype=torch.long, device=gidx.device)
    first = first.scatter_reduce_(0, gidx, torch.arange(n, device=gidx.device), "amin")
    entropy_g = adv.entropy.float()[first]
    global_g = adv.global_adv.float()[first]
    reward_g = adv.prompt_reward.float()[first]

    return {
        ENTROPY_MEAN: entropy_g.mean().item(),
        ENTROPY_MIN: entropy_g.min().item(),
        ENTROPY_MAX: entropy_g.max().item(),
        LOCAL_WEIGHT_MEAN: adv.local_weight.float().mean().item(),
        GLOBAL_ADV_MEAN: global_g.mean().item(),
        GLOBAL_ADV_STD: global_g.std().item() if n_groups > 1 else 0.0,
        FRAC_NONZERO_ADV: (adv.blended.float().abs() > NONZERO_ADV_TOL).float().mean().item(),
        PROMPT_REWARD_MEAN: reward_g.mean().item(),
    }


@torch.no_grad()
def signal_budget_metrics(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    scores: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray | torch.Tensor,
) -> dict[str, float]:
    """How a step spends its samples, for any advantage estimator (GRPO, COPO, GCPO, ...).

    A response carries a learning signal when any of its response tokens has
    ``|advantage| > NONZERO_ADV_TOL``; a response is *correct* when its score is > 0.

    Args:
        advantages: (N, L) per-token advantages as the actor will read them.
        response_mask: (N, L) 1 on response tokens.
        scores: (N,) outcome rewards.
        index: length-N prompt ids (verl's ``uid``).

    Returns:
        python floats: ``frac_nonzero_adv`` (over the N responses), ``frac_groups_all_correct``,
        ``frac_groups_all_wrong``, ``frac_groups_zero_variance`` (all rewards of the group equal; a
        group of one counts) over the P prompts, ``num_responses`` (N) and ``num_groups`` (P).
    """
    check_step_batch(advantages, response_mask, scores, index)
    gidx, n_groups = group_inverse(index, device=scores.device)
    scores = scores.float()
    correct = (scores > 0).float()
    live = (advantages.float().abs() > NONZERO_ADV_TOL) & response_mask.bool()
    min_score = group_reduce(scores, gidx, n_groups, "amin")
    max_score = group_reduce(scores, gidx, n_groups, "amax")
    return {
        FRAC_NONZERO_ADV: live.any(dim=1).float().mean().item(),
        FRAC_GROUPS_ALL_CORRECT: (group_reduce(correct, gidx, n_groups, "amin") == 1).float().mean().item(),
        FRAC_GROUPS_ALL_WRONG: (group_reduce(correct, gidx, n_groups, "amax") == 0).float().mean().item(),
        FRAC_GROUPS_ZERO_VARIANCE: (min_score == max_score).float().mean().item(),
        NUM_RESPONSES: float(scores.shape[0]),
        NUM_GROUPS: float(n_groups),
    }
