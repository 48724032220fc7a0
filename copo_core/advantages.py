"""COPO advantages (SPEC sections 1-4): local (GRPO), consistency entropy, global, blend weight.

All statistics are computed with scatter reductions over a group index, so the cost is a
handful of O(N) tensor ops plus one dict pass over prompt ids and one over answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from copo_core.config import BLEND_MODES, ENTROPY_SOURCES, LOCAL_ESTIMATORS, CopoConfig
from copo_core.grouping import factorize_hashables, group_inverse, group_reduce

__all__ = [
    "BLEND_MODES",
    "ENTROPY_SOURCES",
    "LOCAL_ADVANTAGES",
    "CopoAdvantages",
    "compute_copo_advantages",
    "group_normalized_advantage",
    "rloo_advantage",
]


@dataclass(frozen=True, eq=False)  # tensor fields: no elementwise __eq__
class CopoAdvantages:
    """Per-response COPO quantities; every tensor field is (N,) float32 on the scores' device.

    Attributes:
        local_adv: A^L_i, GRPO advantage inside the response's group.
        global_adv: A^G of the response's prompt (inter-group, over the whole batch).
        local_weight: w_i, weight of the local loss term (1 - w_i weighs the global term).
        entropy: H of the response's group in bits.
        prompt_reward: R of the response's prompt (mean reward times the entropy factor).
        group_index: (N,) int64 group id in ``[0, num_groups)`` (None when built by hand).
        num_groups: number of prompts P (None when built by hand).
    """

    local_adv: torch.Tensor
    global_adv: torch.Tensor
    local_weight: torch.Tensor
    entropy: torch.Tensor
    prompt_reward: torch.Tensor
    group_index: torch.Tensor | None = None
    num_groups: int | None = None

    @property
    def blended(self) -> torch.Tensor:
        """(N,) single-advantage view ``w * A^L + (1 - w) * A^G``.

        For the clipped loss this is exact only when ``w`` is 0 or 1; the COPO policy loss
        clips the two terms separately (``copo_policy_loss``).
        """
        w = self.local_weight
        return w * self.local_adv + (1.0 - w) * self.global_adv


def _validate_scores(scores: torch.Tensor | Sequence[float] | np.ndarray) -> torch.Tensor:
    if not isinstance(scores, torch.Tensor):
        try:
            scores = torch.as_tensor(np.asarray(scores, dtype=np.float32))
        except (TypeError, ValueError) as err:
            raise ValueError(f"`scores` must be a (N,) tensor of numbers: {err}") from err
    if scores.ndim != 1:
        raise ValueError(
            f"`scores` must be a 1-D (N,) tensor of outcome rewards, got shape {tuple(scores.shape)}; "
            "sum token-level rewards over the response dimension first"
        )
    if scores.numel() == 0:
        raise ValueError(
            "`scores` is empty: compute_copo_advantages needs at least one response (empty batch)"
        )
    if scores.dtype.is_complex:
        raise ValueError(f"`scores` must be real, got dtype {scores.dtype}")
    # float32 math for every input dtype (bf16/fp16 would lose the group statistics).
    scores = scores.to(torch.float32)
    if not bool(torch.isfinite(scores).all()):
        bad = int((~torch.isfinite(scores)).sum())
        raise ValueError(f"`scores` holds {bad} NaN/inf value(s); fix the reward function output")
    return scores


def _check_eps(eps: float) -> None:
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"`eps` must be a finite number >= 0, got {eps}")


@torch.no_grad()
def group_normalized_advantage(
    scores: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    *,
    norm_adv_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO advantage inside each group (SPEC section 1), in float32.

    Same op order as verl's ``grpo_vectorized`` (``verl.utils.groupwise.group_mean_std``), so
    values match it bit for bit. Groups of size 1 use mean 0, std 1 (verl's convention);
    groups of size >= 2 whose values are all equal get exactly 0 (verl gives rounding noise
    divided by eps there).

    Args:
        scores: (N,) values. group_index: (N,) int64 in ``[0, num_groups)``.
        norm_adv_by_std: divide by ``std + eps`` (GRPO) or only centre (Dr.GRPO).

    Returns:
        (N,) float32 advantages.
    """
    scores = scores.to(torch.float32)
    gidx = group_index
    count = group_reduce(torch.ones_like(scores), gidx, num_groups, "sum")
    mean = group_reduce(scores, gidx, num_groups, "sum") / count.clamp_min(1.0)
    centered = scores - mean[gidx]
    var = group_reduce(centered * centered, gidx, num_groups, "sum") / (count - 1.0).clamp_min(1.0)
    std = torch.sqrt(torch.clamp(var, min=0.0))
    single = count <= 1.0
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    adv = scores - mean[gidx]
    if norm_adv_by_std:
        adv = adv / (std[gidx] + eps)
    # Exact zero for constant groups: the rounding error of the mean must not become a signal.
    constant = (
        group_reduce(scores, gidx, num_groups, "amax") == group_reduce(scores, gidx, num_groups, "amin")
    ) & ~single
    return torch.where(constant[gidx], torch.zeros_like(adv), adv)


@torch.no_grad()
def rloo_advantage(scores: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """RLOO advantage inside each group: ``r_i - mean of the group's other rewards``, in float32.

    Written as verl's ``compute_rloo_outcome_advantage`` writes it (``r * G / (G - 1) - mean * G / (G - 1)``,
    float32, left to right), so values match it bit for bit; a group of size 1 keeps its reward (verl's
    loop estimator). A group whose values are all equal gets exactly 0 (the two terms are the same number).

    Args:
        scores: (N,) values. group_index: (N,) int64 in ``[0, num_groups)``.

    Returns:
        (N,) float32 advantages.
    """
    scores = scores.to(torch.float32)
    count = group_reduce(torch.ones_like(scores), group_index, num_groups, "sum")
    mean = group_reduce(scores, group_index, num_groups, "sum") / count.clamp_min(1.0)
    size, mean = count[group_index], mean[group_index]
    others = size - 1.0
    adv = scores * size / others - mean * size / others
    return torch.where(size > 1.0, adv, scores)


# A local estimator's maths: (scores, group_index, num_groups, norm_adv_by_std, eps) -> (N,) float32.
LocalAdvantage = Callable[[torch.Tensor, torch.Tensor, int, bool, float], torch.Tensor]


def _grpo(scores: torch.Tensor, gidx: torch.Tensor, p: int, norm: bool, eps: float) -> torch.Tensor:
    return group_normalized_advantage(scores, gidx, p, norm_adv_by_std=norm, eps=eps)


def _drgrpo(scores: torch.Tensor, gidx: torch.Tensor, p: int, norm: bool, eps: float) -> torch.Tensor:
    return group_normalized_advantage(scores, gidx, p, norm_adv_by_std=False, eps=eps)


def _rloo(scores: torch.Tensor, gidx: torch.Tensor, p: int, norm: bool, eps: float) -> torch.Tensor:
    return rloo_advantage(scores, gidx, p)


# ``algorithm.copo.local_estimator`` -> the local term's maths (SPEC section 1). ``gcpo``'s local term needs
# response embeddings: here it is GRPO's (which the forced blend modes' 1[A^L != 0] reads); the recipe's step
# replaces the local term with GCPO's advantage (recipe/copo/estimators.py).
LOCAL_ADVANTAGES: dict[str, LocalAdvantage] = {"grpo": _grpo, "drgrpo": _drgrpo, "rloo": _rloo, "gcpo": _grpo}
if tuple(LOCAL_ADVANTAGES) != LOCAL_ESTIMATORS:
    raise AssertionError("copo_core.config.LOCAL_ESTIMATORS and LOCAL_ADVANTAGES must list the same names")


def _class_ids(
    scores: torch.Tensor,
    answers: Sequence[str | None] | np.ndarray | None,
    entropy_source: str,
) -> tuple[torch.Tensor, int]:
    """Outcome class of each response: its answer string, or its reward value."""
    if entropy_source == "answer" and answers is not None:
        values = answers.tolist() if isinstance(answers, np.ndarray) else answers
        # An unparseable answer (None) and the empty string are the same class (SPEC section 2).
        codes, n_classes = factorize_hashables(["" if a is None else a for a in values], name="answers")
        return torch.tensor(codes, dtype=torch.long, device=scores.device), n_classes
    unique, inverse = torch.unique(scores, return_inverse=True)
    return inverse, int(unique.numel())


def _consistency_entropy(
    classes: torch.Tensor, n_classes: int, gidx: torch.Tensor, n_groups: int, count: torch.Tensor
) -> torch.Tensor:
    """(P,) entropy in bits of the outcome-class distribution of each group."""
    pair = gidx * n_classes + classes  # one id per (group, class) cell
    cells, cell_count = torch.unique(pair, return_counts=True)
    cell_group = torch.div(cells, n_classes, rounding_mode="floor")
    p = cell_count.to(count.dtype) / count[cell_group]
    return group_reduce(-p * torch.log2(p), cell_group, n_groups, "sum").clamp_min(0.0)


def _global_advantage(prompt_reward: torch.Tensor, norm: bool, eps: float) -> torch.Tensor:
    """(P,) -> (P,) normalisation of prompt rewards across the batch; 0 when P == 1 or all equal."""
    if prompt_reward.numel() < 2:
        return torch.zeros_like(prompt_reward)
    adv = prompt_reward - prompt_reward.mean()
    if norm:
        adv = adv / (prompt_reward.std() + eps)
    constant = prompt_reward.max() == prompt_reward.min()
    return torch.where(constant, torch.zeros_like(adv), adv)


def _blend_weight(
    blend_mode: str, gate: torch.Tensor, scores: torch.Tensor, local_adv: torch.Tensor
) -> torch.Tensor:
    """(N,) weight of the local loss per response (SPEC section 4 table)."""
    nonzero_reward = (scores != 0).to(torch.float32)
    nonzero_adv = (local_adv != 0).to(torch.float32)
    if blend_mode == "soft":
        return gate
    if blend_mode == "soft_with_zero":
        return gate * nonzero_reward
    if blend_mode == "soft_with_forced":
        return gate * nonzero_adv
    if blend_mode == "zero":
        return nonzero_reward
    if blend_mode == "forced":
        return nonzero_adv
    if blend_mode == "global_only":
        return torch.zeros_like(gate)
    return torch.ones_like(gate)  # local_only


@torch.no_grad()
def compute_copo_advantages(
    scores: torch.Tensor,
    index: Sequence[Hashable] | np.ndarray | torch.Tensor,
    answers: Sequence[str | None] | np.ndarray | None = None,
    *,
    k: float = CopoConfig.k,
    b: float = CopoConfig.b,
    blend_mode: str = CopoConfig.blend_mode,
    entropy_source: str = CopoConfig.entropy_source,
    entropy_penalty: bool = CopoConfig.entropy_penalty,
    norm_adv_by_std: bool = True,
    eps: float = 1e-6,
    local_estimator: str = CopoConfig.local_estimator,
    wrong_answer_global: str = CopoConfig.wrong_answer_global,
) -> CopoAdvantages:
    """Compute COPO's local and global advantages and the per-response blend weight.

    Args:
        scores: (N,) outcome reward per response (any real dtype; math runs in float32).
        index: length-N prompt ids (verl's ``uid``): any hashables, or an int tensor/array.
        answers: length-N extracted final answers (str; None counts as the empty string,
            "unparseable"), or None to use the distinct reward values as outcome classes.
        k: gate sharpness, >= 0. b: gate threshold in bits.
        blend_mode: one of ``BLEND_MODES``. entropy_source: ``"answer"`` or ``"reward"``.
        entropy_penalty: scale prompt rewards by ``1 - lambda_j * H_j`` (SPEC section 3).
        norm_adv_by_std: divide by ``std + eps`` (GRPO) or only centre (Dr.GRPO).
        eps: added to the standard deviations.
        local_estimator: the local term's maths, one of ``LOCAL_ESTIMATORS`` (``LOCAL_ADVANTAGES``):
            ``grpo`` (as verl's grpo with ``norm_adv_by_std``), ``drgrpo`` (grpo without the std division,
            whatever ``norm_adv_by_std``), ``rloo`` (as verl's rloo); ``gcpo`` computes GRPO's here (the
            recipe's step replaces the local term with GCPO's advantage).
        wrong_answer_global: ``keep`` (the paper) or ``nonpositive``, this project's variant (not the
            paper's, SPEC section 4a): a response with reward 0 gets ``min(A^G, 0)`` as its global
            advantage, so a wrong answer is never pushed up. Refused with ``local_only``.

    Returns:
        ``CopoAdvantages`` with (N,) float32 fields on ``scores``' device, plus the (N,)
        group inverse ``group_index`` and ``num_groups`` P.

    Conventions (SPEC 1-3): a group of size 1 has mean 0, std 1 (verl), so A^L = r / (1 + eps);
    a group of size >= 2 with equal rewards has A^L = 0 exactly; with one prompt, or all
    prompt rewards equal, A^G = 0 exactly. Outputs are finite for every valid input.
    ``local_only`` reproduces verl's ``grpo_vectorized`` local advantage bit for bit.

    Raises:
        ValueError: naming the argument, for an empty batch, non-1-D or NaN/inf ``scores``,
            length mismatch of ``index``/``answers``; ``ConfigError`` (a ValueError) for a
            value ``CopoConfig`` rejects (unknown ``blend_mode``/``entropy_source``, ``k < 0``, ...).
    """
    scores = _validate_scores(scores)
    # The config section's checks and messages (a bad argument raises ConfigError, a ValueError).
    copo = CopoConfig(
        k=k,
        b=b,
        blend_mode=blend_mode,
        entropy_source=entropy_source,
        entropy_penalty=entropy_penalty,
        local_estimator=local_estimator,
        wrong_answer_global=wrong_answer_global,
    )
    _check_eps(eps)
    n = scores.numel()
    if len(index) != n:
        raise ValueError(f"`index` has length {len(index)} but `scores` has {n}: one prompt id per response")
    if answers is not None and len(answers) != n:
        raise ValueError(f"`answers` has length {len(answers)} but `scores` has {n}: one answer per response")

    gidx, n_groups = group_inverse(index, device=scores.device)
    local_adv = LOCAL_ADVANTAGES[copo.local_estimator](scores, gidx, n_groups, norm_adv_by_std, eps)

    # Per-prompt statistics in float64 (P values, cheap): the global advantage subtracts
    # nearly equal prompt rewards, and float32 would make it depend on the prompt order.
    stat_dtype = torch.float32 if scores.device.type == "mps" else torch.float64
    scores_hi = scores.to(stat_dtype)
    count = group_reduce(torch.ones_like(scores_hi), gidx, n_groups, "sum")
    classes, n_classes = _class_ids(scores, answers, copo.entropy_source)
    entropy_g = _consistency_entropy(classes, n_classes, gidx, n_groups, count)

    mean_reward_g = group_reduce(scores_hi, gidx, n_groups, "sum") / count
    if copo.entropy_penalty:
        # lambda_j = (1 - 1/G_j) / log2 G_j makes c_j = 1/G_j at maximal entropy; c_j = 1 for G_j = 1.
        lam = (1.0 - 1.0 / count) / torch.log2(count).clamp_min(1.0e-12)
        lam = torch.where(count > 1, lam, torch.zeros_like(lam))
        prompt_reward_g = mean_reward_g * (1.0 - lam * entropy_g)
    else:
        prompt_reward_g = mean_reward_g
    global_adv_g = _global_advantage(prompt_reward_g, norm_adv_by_std, eps)

    entropy = entropy_g[gidx]
    gate = torch.sigmoid(copo.k * (entropy - copo.b)).to(torch.float32)
    local_weight = _blend_weight(copo.blend_mode, gate, scores, local_adv)

    global_adv, entropy, prompt_reward = (
        t.to(torch.float32) for t in (global_adv_g[gidx], entropy, prompt_reward_g[gidx])
    )
    if (
        copo.wrong_answer_global == "nonpositive"
    ):  # this project's variant (SPEC 4a): never push a wrong answer up
        global_adv = torch.where(scores == 0, global_adv.clamp_max(0.0), global_adv)
    return CopoAdvantages(
        local_adv=local_adv,
        global_adv=global_adv,
        local_weight=local_weight,
        entropy=entropy,
        prompt_reward=prompt_reward,
        group_index=gidx,
        num_groups=n_groups,
    )
