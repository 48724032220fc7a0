"""The mechanism of a step, for any estimator: the advantage a wrong answer gets, by the kind of its
group and its prompt's success rate.

Where COPO helps and where it hurts turns on the sign of a wrong answer's advantage: in an all-wrong
group GRPO gives it 0 and COPO's global term gives it the prompt's (negative) global advantage; in a
mixed group on an easy prompt ``soft_with_zero`` gives it the pure global advantage, which is positive
when the prompt's mean reward is above the batch's. :func:`wrong_answer_metrics` measures both per
step (logged under ``mechanism/``; recipe/tracking/names.py builds the names from the keys below).

A response is *correct* when its score is > 0 (as in ``signal_budget_metrics``), *wrong* otherwise
(reward 0 for the 0/1 reward). A group's *success* is its share of correct responses: 0 for an
all-wrong group, 1 for an all-correct one, strictly between for a mixed one. Mixed groups are binned by
success over ``SUCCESS_BIN_EDGES``: bin ``i`` holds ``edges[i] <= success < edges[i + 1]``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

from copo_core.grouping import check_step_batch, group_inverse, group_reduce

__all__ = [
    "MECHANISM_METRIC_KEYS",
    "MIXED_BIN_KEYS",
    "SUCCESS_BIN_EDGES",
    "wrong_answer_metrics",
]

SUCCESS_BIN_EDGES = (0.0, 0.25, 0.5, 0.75, 1.0)

FRAC_GROUPS_ALL_WRONG = "frac_groups_all_wrong"
FRAC_GROUPS_MIXED = "frac_groups_mixed"
FRAC_GROUPS_ALL_CORRECT = "frac_groups_all_correct"
WRONG_ADV_ALL_WRONG = "wrong_adv_all_wrong"  # mean advantage of the wrong answers of all-wrong groups
NUM_WRONG_ALL_WRONG = "num_wrong_all_wrong"  # how many (to pool steps and seeds: weight by this)
WRONG_ADV_MIXED = "wrong_adv_mixed"  # mean advantage of the wrong answers of mixed groups
NUM_WRONG_MIXED = "num_wrong_mixed"


def _bin_label(low: float, high: float) -> str:
    """``s025_050`` for success in [0.25, 0.5): percent, three digits (metric names stay [a-z0-9_])."""
    return f"s{round(100 * low):03d}_{round(100 * high):03d}"


_BINS = tuple(zip(SUCCESS_BIN_EDGES[:-1], SUCCESS_BIN_EDGES[1:], strict=True))
# per success bin of mixed groups: (mean advantage key, count key)
MIXED_BIN_KEYS = tuple(
    (f"{WRONG_ADV_MIXED}_{_bin_label(lo, hi)}", f"{NUM_WRONG_MIXED}_{_bin_label(lo, hi)}") for lo, hi in _BINS
)
MECHANISM_METRIC_KEYS = (
    FRAC_GROUPS_ALL_WRONG,
    FRAC_GROUPS_MIXED,
    FRAC_GROUPS_ALL_CORRECT,
    WRONG_ADV_ALL_WRONG,
    NUM_WRONG_ALL_WRONG,
    WRONG_ADV_MIXED,
    NUM_WRONG_MIXED,
    *(key for pair in MIXED_BIN_KEYS for key in pair),
)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(mean of ``values`` where ``mask``, or NaN when none; how many)."""
    count = mask.sum()
    total = (values * mask).sum()
    return (total / count).item() if count > 0 else float("nan"), count.item()


@torch.no_grad()
def wrong_answer_metrics(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    scores: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray | torch.Tensor,
) -> dict[str, float]:
    """The advantage of wrong answers by group kind and success bin, and the share of each group kind.

    A response's advantage is the mean of its per-token advantages over its response tokens (for an
    outcome reward every token carries the same value).

    Args:
        advantages: (N, L) per-token advantages as the actor will read them.
        response_mask: (N, L) 1 on response tokens.
        scores: (N,) outcome rewards.
        index: length-N prompt ids (verl's ``uid``).

    Returns:
        python floats, keys ``MECHANISM_METRIC_KEYS`` in order: the shares of all-wrong, mixed and
        all-correct groups over the P prompts; the mean advantage of wrong answers in all-wrong groups
        and in mixed groups, and per success bin of mixed groups (``MIXED_BIN_KEYS``), each with its
        count of wrong answers. A mean over no answer is NaN (its count is 0).
    """
    check_step_batch(advantages, response_mask, scores, index)
    gidx, n_groups = group_inverse(index, device=scores.device)
    mask = response_mask.to(scores.device, torch.float32)
    tokens = mask.sum(dim=1)
    adv = (advantages.to(scores.device, torch.float32) * mask).sum(dim=1) / tokens.clamp_min(1.0)  # (N,)
    correct = (scores.float() > 0).float()
    size_g = group_reduce(torch.ones_like(correct), gidx, n_groups, "sum")
    success_g = group_reduce(correct, gidx, n_groups, "sum") / size_g  # (P,)
    all_wrong_g, all_correct_g = success_g == 0, success_g == 1
    mixed_g = ~(all_wrong_g | all_correct_g)
    wrong = (correct == 0).float()
    success = success_g[gidx]  # (N,)
    out = {
        FRAC_GROUPS_ALL_WRONG: all_wrong_g.float().mean().item(),
        FRAC_GROUPS_MIXED: mixed_g.float().mean().item(),
        FRAC_GROUPS_ALL_CORRECT: all_correct_g.float().mean().item(),
    }
    out[WRONG_ADV_ALL_WRONG], out[NUM_WRONG_ALL_WRONG] = _masked_mean(adv, wrong * all_wrong_g[gidx].float())
    in_mixed = wrong * mixed_g[gidx].float()
    out[WRONG_ADV_MIXED], out[NUM_WRONG_MIXED] = _masked_mean(adv, in_mixed)
    inner = torch.tensor(SUCCESS_BIN_EDGES[1:-1], dtype=success.dtype, device=success.device)
    bins = torch.bucketize(success, inner, right=True)  # (N,): edges[i] <= success < edges[i + 1]
    sums = torch.zeros(len(MIXED_BIN_KEYS), device=adv.device).index_add_(0, bins, adv * in_mixed)
    counts = torch.zeros(len(MIXED_BIN_KEYS), device=adv.device).index_add_(0, bins, in_mixed)
    means = torch.where(counts > 0, sums / counts.clamp_min(1.0), torch.full_like(sums, float("nan")))
    for (mean_key, count_key), mean, count in zip(
        MIXED_BIN_KEYS, means.tolist(), counts.tolist(), strict=True
    ):
        out[mean_key], out[count_key] = mean, count
    return out
