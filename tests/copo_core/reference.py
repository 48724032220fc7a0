"""Slow, obviously-correct loop references for copo_core (SPEC sections 1-5 and 8), in float64.

Written straight from the SPEC and from verl 0.9.1's ``compute_policy_loss_vanilla`` /
``agg_loss``, one response (or token) at a time, with no code shared with copo_core.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

import torch


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _std_unbiased(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _groups(index: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    groups: dict[Hashable, list[int]] = {}
    for i, idx in enumerate(index):
        groups.setdefault(idx, []).append(i)
    return groups


def ref_local_advantage(
    scores: Sequence[float], index: Sequence[Hashable], norm_adv_by_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """SPEC 1: GRPO advantage; size-1 group: mean 0, std 1; all-equal group (size >= 2): 0."""
    out = [0.0] * len(scores)
    for members in _groups(index).values():
        rs = [scores[i] for i in members]
        if len(rs) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = _mean(rs), _std_unbiased(rs)
        for i in members:
            if len(rs) > 1 and all(r == rs[0] for r in rs):
                out[i] = 0.0
            elif norm_adv_by_std:
                out[i] = (scores[i] - mean) / (std + eps)
            else:
                out[i] = scores[i] - mean
    return out


def ref_entropy_bits(labels: Sequence[Hashable]) -> float:
    """SPEC 2: -sum p log2 p over the distinct labels."""
    n = len(labels)
    return -sum((c / n) * math.log2(c / n) for c in Counter(labels).values())


def ref_copo_advantages(
    scores: Sequence[float],
    index: Sequence[Hashable],
    answers: Sequence[str | None] | None = None,
    *,
    k: float = 5.0,
    b: float = 1.0,
    blend_mode: str = "soft_with_zero",
    entropy_source: str = "answer",
    entropy_penalty: bool = False,
    norm_adv_by_std: bool = True,
    eps: float = 1e-6,
    wrong_answer_global: str = "keep",
) -> dict[str, list[float]]:
    """SPEC 1-4 (and 4a: ``wrong_answer_global``), one group at a time. Returns per-response lists keyed like CopoAdvantages."""
    n = len(scores)
    groups = _groups(index)
    local = ref_local_advantage(scores, index, norm_adv_by_std, eps)

    entropy_of: dict[Hashable, float] = {}
    reward_of: dict[Hashable, float] = {}
    for gid, members in groups.items():
        if entropy_source == "answer" and answers is not None:
            labels = ["" if answers[i] is None else answers[i] for i in members]
        else:
            labels = [scores[i] for i in members]
        h = ref_entropy_bits(labels)
        size = len(members)
        c = 1.0
        if entropy_penalty and size > 1:
            c = 1.0 - (1.0 - 1.0 / size) / math.log2(size) * h
        entropy_of[gid] = h
        reward_of[gid] = _mean([scores[i] for i in members]) * c

    prompt_rewards = list(reward_of.values())
    global_of: dict[Hashable, float] = {}
    for gid, r in reward_of.items():
        if len(prompt_rewards) == 1 or all(x == prompt_rewards[0] for x in prompt_rewards):
            global_of[gid] = 0.0
        elif norm_adv_by_std:
            global_of[gid] = (r - _mean(prompt_rewards)) / (_std_unbiased(prompt_rewards) + eps)
        else:
            global_of[gid] = r - _mean(prompt_rewards)

    out: dict[str, list[float]] = {
        "local_adv": local,
        "global_adv": [0.0] * n,
        "local_weight": [0.0] * n,
        "entropy": [0.0] * n,
        "prompt_reward": [0.0] * n,
    }
    for i in range(n):
        gid = index[i]
        h = entropy_of[gid]
        gate = 1.0 / (1.0 + math.exp(-k * (h - b)))
        weight = {
            "soft": gate,
            "soft_with_zero": gate if scores[i] != 0 else 0.0,
            "soft_with_forced": gate if local[i] != 0 else 0.0,
            "zero": 1.0 if scores[i] != 0 else 0.0,
            "forced": 1.0 if local[i] != 0 else 0.0,
            "global_only": 0.0,
            "local_only": 1.0,
        }[blend_mode]
        wrong = scores[i] == 0
        capped = wrong_answer_global == "nonpositive" and wrong
        out["global_adv"][i] = min(global_of[gid], 0.0) if capped else global_of[gid]
        out["local_weight"][i] = weight
        out["entropy"][i] = h
        out["prompt_reward"][i] = reward_of[gid]
    return out


def ref_vanilla_token_loss(
    adv: float, old_lp: float, lp: float, clip_low: float, clip_high: float, clip_c: float
) -> tuple[float, bool, bool]:
    """verl's vanilla PPO token loss: (loss, clipped, clipped_lower) for one token."""
    log_ratio = min(max(lp - old_lp, -20.0), 20.0)
    ratio = math.exp(log_ratio)
    loss1 = -adv * ratio
    loss2 = -adv * min(max(ratio, 1.0 - clip_low), 1.0 + clip_high)
    clipped_loss = max(loss1, loss2)
    loss3 = -adv * clip_c
    if adv < 0:
        return min(loss3, clipped_loss), loss2 > loss1, clipped_loss > loss3
    return clipped_loss, loss2 > loss1, False


def ref_agg_loss(
    loss: Sequence[Sequence[float]],
    mask: Sequence[Sequence[float]],
    mode: str,
    *,
    dp_size: int = 1,
    batch_num_tokens: float | None = None,
    global_batch_size: float | None = None,
    loss_scale_factor: float | None = None,
) -> float:
    """verl 0.9.1 agg_loss, row by row."""
    n_tokens = sum(sum(row) for row in mask)
    if mode in ("token-mean", "token-sum"):
        total = sum(
            v * m for lrow, mrow in zip(loss, mask, strict=True) for v, m in zip(lrow, mrow, strict=True) if m
        )
        if mode == "token-sum":
            return total * dp_size
        return total / (n_tokens if batch_num_tokens is None else batch_num_tokens) * dp_size
    seq_values = []
    for lrow, mrow in zip(loss, mask, strict=True):
        count = sum(mrow)
        if count == 0:
            continue  # fully masked sequences do not count
        s = sum(v * m for v, m in zip(lrow, mrow, strict=True))
        seq_values.append(s / count if mode == "seq-mean-token-mean" else s)
    denom = len(seq_values) if global_batch_size is None else global_batch_size
    result = sum(seq_values) / denom * dp_size
    if mode == "seq-mean-token-sum-norm":
        result /= len(mask[0]) if loss_scale_factor is None else loss_scale_factor
    return result


def ref_copo_policy_loss(
    old_log_prob: Sequence[Sequence[float]],
    log_prob: Sequence[Sequence[float]],
    local_adv: Sequence[Sequence[float]],
    global_adv: Sequence[Sequence[float]],
    local_weight: Sequence[Sequence[float]],
    mask: Sequence[Sequence[float]],
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "seq-mean-token-mean",
    **agg_kwargs: float | None,
) -> dict[str, float]:
    """SPEC 5 token by token; advantages and weights given per token (N x L lists)."""
    rows, cols = len(log_prob), len(log_prob[0])
    local_part = [[0.0] * cols for _ in range(rows)]
    global_part = [[0.0] * cols for _ in range(rows)]
    clip_l = clip_g = lower_l = lower_g = 0
    kl_sum = 0.0
    for i in range(rows):
        for t in range(cols):
            w = local_weight[i][t]
            args = (old_log_prob[i][t], log_prob[i][t], clip_ratio_low, clip_ratio_high, clip_ratio_c)
            l_loc, c_loc, lo_loc = ref_vanilla_token_loss(local_adv[i][t], *args)
            l_glo, c_glo, lo_glo = ref_vanilla_token_loss(global_adv[i][t], *args)
            local_part[i][t] = w * l_loc
            global_part[i][t] = (1.0 - w) * l_glo
            if mask[i][t]:
                clip_l += c_loc
                clip_g += c_glo
                lower_l += lo_loc
                lower_g += lo_glo
                kl_sum += -min(max(log_prob[i][t] - old_log_prob[i][t], -20.0), 20.0)
    n_tokens = sum(sum(row) for row in mask)
    pl = ref_agg_loss(local_part, mask, loss_agg_mode, **agg_kwargs)
    pgl = ref_agg_loss(global_part, mask, loss_agg_mode, **agg_kwargs)
    return {
        "pg_loss": pl + pgl,
        "pg_loss_local": pl,
        "pg_loss_global": pgl,
        "pg_clipfrac_local": clip_l / n_tokens,
        "pg_clipfrac_global": clip_g / n_tokens,
        "pg_clipfrac_lower_local": lower_l / n_tokens,
        "pg_clipfrac_lower_global": lower_g / n_tokens,
        "ppo_kl": kl_sum / n_tokens,
    }


def ref_batch_metrics(adv: dict[str, list[float]], index: Sequence[Hashable]) -> dict[str, float]:
    """copo_batch_metrics one group at a time."""
    groups = list(_groups(index).values())
    first = [members[0] for members in groups]
    entropies = [adv["entropy"][i] for i in first]
    global_adv = [adv["global_adv"][i] for i in first]
    blended = [
        w * a + (1.0 - w) * g
        for w, a, g in zip(adv["local_weight"], adv["local_adv"], adv["global_adv"], strict=True)
    ]
    p = len(groups)
    return {
        "entropy_mean": _mean(entropies),
        "entropy_min": min(entropies),
        "entropy_max": max(entropies),
        "local_weight_mean": _mean(adv["local_weight"]),
        "global_adv_mean": _mean(global_adv),
        "global_adv_std": _std_unbiased(global_adv) if p > 1 else 0.0,
        "frac_nonzero_adv": sum(abs(x) > 1e-8 for x in blended) / len(blended),
        "prompt_reward_mean": _mean([adv["prompt_reward"][i] for i in first]),
    }


def ref_wrong_answer_metrics(
    advantages: list[list[float]], mask: list[list[float]], scores: Sequence[float], index: Sequence[Hashable]
) -> dict[str, float]:
    """wrong_answer_metrics one group and one response at a time (bins: quarters of success)."""
    edges = (0.0, 0.25, 0.5, 0.75, 1.0)
    labels = ("s000_025", "s025_050", "s050_075", "s075_100")
    kinds = {"all_wrong": 0, "mixed": 0, "all_correct": 0}
    wrong: dict[str, list[float]] = {"all_wrong": [], "mixed": [], **{b: [] for b in labels}}
    groups = _groups(index)
    for members in groups.values():
        success = sum(scores[i] > 0 for i in members) / len(members)
        kind = "all_wrong" if success == 0 else "all_correct" if success == 1 else "mixed"
        kinds[kind] += 1
        for i in members:
            if scores[i] > 0:
                continue
            tokens = [a for a, m in zip(advantages[i], mask[i], strict=True) if m]
            adv = sum(tokens) / len(tokens) if tokens else 0.0
            if kind == "all_wrong":
                wrong["all_wrong"].append(adv)
            elif kind == "mixed":
                wrong["mixed"].append(adv)
                for label, low, high in zip(labels, edges[:-1], edges[1:], strict=True):
                    if low <= success < high:
                        wrong[label].append(adv)
    out = {f"frac_groups_{k}": v / len(groups) for k, v in kinds.items()}
    for key, values in wrong.items():
        name = key if key in ("all_wrong", "mixed") else f"mixed_{key}"
        out[f"wrong_adv_{name}"] = _mean(values) if values else float("nan")
        out[f"num_wrong_{name}"] = float(len(values))
    return out


# --------------------------------------------------------------------------- GCPO (SPEC section 8)


def ref_coverage(vectors: torch.Tensor, subset: tuple[int, ...], alpha: float) -> float:
    """f(S) = log det(I_d + alpha V_S^T V_S), vectors (G, d) float64 already weighted by q."""
    if not subset:
        return 0.0
    v = vectors[list(subset)]
    d = v.shape[1]
    return float(torch.logdet(torch.eye(d, dtype=torch.float64) + alpha * v.T @ v))


def ref_weighted(embeddings: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    unit = embeddings.double() / embeddings.double().norm(dim=-1, keepdim=True)
    return unit * rewards.double().clamp_min(0)[:, None]


def ref_gcpo_coverage(
    embeddings: torch.Tensor, rewards: torch.Tensor, index: Sequence[Hashable], alpha: float
) -> list[float]:
    """f(group of response i) for every response i, one group at a time (d x d form)."""
    vectors = ref_weighted(embeddings, rewards)
    coverage = [0.0] * len(index)
    for members in _groups(index).values():
        value = ref_coverage(vectors[members], tuple(range(len(members))), alpha)
        for i in members:
            coverage[i] = value
    return coverage
