"""GCPO: cooperative, coverage-based advantages (SPEC section 8). Pure torch.

Each response i carries a unit semantic embedding e_i and a correctness weight
q_i = max(r_i, 0); its vector is v_i = q_i * e_i. The team coverage of a subset S of a
group is

    f(S) = log det(I + alpha * V_S V_S^T),      f(empty) = 0,

so wrong responses (q = 0) add nothing and a response parallel to the others adds
little (f is monotone and submodular). A response's share is its Shapley value phi_i of
f over its group: exact over all 2^G subsets when G <= ``exact_max_g``, else a seeded
Monte Carlo average over random permutations. Both estimators are efficient by
construction: sum_i phi_i = f(group) (the Monte Carlo marginals of one permutation
telescope to f(group)).

Vectorisation: groups are bucketed by size (a loop over the distinct sizes only, never
over groups or responses); inside a bucket every group's Gram matrix is stacked, and

* exact: all 2^G subset values come from one Gaussian elimination down a binary tree
  (skip or eliminate player j at level j), vectorised over groups and tree nodes;
* Monte Carlo: one Cholesky factor L of I + alpha K_pp per (group, permutation p) gives
  every marginal of the permutation at once, because the leading k x k minor has
  log-determinant 2 * sum_{t<k} log L_tt, so the k-th player's marginal is 2 log L_kk.

A wrong response's row is exactly the identity row, so its marginals are exactly 0.0 in
floating point (null player), in both estimators.

Usage::

    shares = gcpo_shapley(emb, scores, uid)                       # (N,)
    adv = compute_gcpo_advantages(emb, scores, uid, beta=1.0)     # (N,)
    metrics = gcpo_metrics(shares, scores, uid)                   # dict of floats
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from functools import cache

import torch

from copo_core.advantages import group_normalized_advantage
from copo_core.config import GcpoConfig
from copo_core.grouping import group_inverse, group_reduce

__all__ = [
    "GCPO_METRIC_KEYS",
    "compute_gcpo_advantages",
    "gcpo_advantages_from_shares",
    "gcpo_metrics",
    "gcpo_shapley",
]

# The keys gcpo_metrics returns; the recipe logs them under ``gcpo/`` (recipe/tracking/names.py).
COVERAGE_MEAN = "coverage_mean"
UNIQUENESS_MEAN = "uniqueness_mean"
FRAC_REDUNDANT_CORRECT = "frac_redundant_correct"
GCPO_METRIC_KEYS = (COVERAGE_MEAN, UNIQUENESS_MEAN, FRAC_REDUNDANT_CORRECT)

# Exact path: float64 elements of the (groups, G, 2^(G-1)) marginals per chunk, bounding peak memory
# (~256 MB); the chunk size barely changes speed there.
_CHUNK_ELEMENTS = 1 << 25
# Monte Carlo: elements of the stacked permuted matrices per chunk. Small chunks stay in cache:
# 512 groups x 64 permutations of 16 x 16 run ~1.7x faster in 2 MB chunks than in one 64 MB block.
_MC_CHUNK_ELEMENTS = 1 << 18


# --------------------------------------------------------------------------- validation


def _check_inputs(
    embeddings: torch.Tensor, rewards: torch.Tensor, index: Sequence[Hashable] | torch.Tensor
) -> None:
    if not isinstance(embeddings, torch.Tensor) or embeddings.dim() != 2:
        raise ValueError(
            f"embeddings must be a 2-D tensor (N, d); got "
            f"{tuple(embeddings.shape) if isinstance(embeddings, torch.Tensor) else type(embeddings)}"
        )
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1:
        raise ValueError("rewards must be a 1-D tensor (N,) of per-response outcome rewards")
    n = embeddings.shape[0]
    if n == 0:
        raise ValueError("embeddings is empty: GCPO needs at least one response")
    if rewards.shape[0] != n or len(index) != n:
        raise ValueError(
            f"length mismatch: embeddings has {n} rows, rewards {rewards.shape[0]}, index {len(index)}; "
            "pass one embedding, one reward and one prompt id per response"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contains NaN or inf; fix the reward function before computing GCPO")
    if not torch.isfinite(embeddings).all():
        raise ValueError("embeddings contains NaN or inf; check the embedder output")


# --------------------------------------------------------------------------- grouping


def _size_buckets(inverse: torch.Tensor, num_groups: int) -> list[torch.Tensor]:
    """Response ids arranged per group, one (P_b, G_b) LongTensor per distinct group size G_b.

    Inside a row, responses keep their batch order (stable sort), which makes the Monte
    Carlo permutations reproducible for a given batch.
    """
    order = torch.argsort(inverse, stable=True)  # (N,) responses sorted by group
    counts = torch.bincount(inverse, minlength=num_groups)  # (P,)
    starts = torch.cumsum(counts, 0) - counts  # (P,) offset of each group in `order`
    tables = []
    for size in torch.unique(counts).tolist():  # loop over distinct sizes only
        gids = torch.nonzero(counts == size).squeeze(1)  # (P_b,)
        offsets = starts[gids, None] + torch.arange(size, device=inverse.device)  # (P_b, G_b)
        tables.append(order[offsets])
    return tables


def _weighted_vectors(embeddings: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """v_i = q_i e_i: (N, d) float64 unit embeddings scaled by the correctness weight max(r_i, 0)."""
    unit = torch.nn.functional.normalize(embeddings.to(torch.float64), dim=-1)
    return unit * rewards.to(device=unit.device, dtype=torch.float64).clamp_min(0.0)[:, None]


def _group_gram(vectors: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Gram matrices K = V V^T (P_b, G, G) of the groups listed in ``table`` (P_b, G)."""
    v = vectors[table]  # (P_b, G, d)
    return v @ v.transpose(-1, -2)


# --------------------------------------------------------------------------- Shapley estimators


@cache
def _exact_tables(g: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shapley pairing of the 2^g subsets of a group of size g (CPU, cached).

    Subset s is the bitmask with bit i set when player i is in it.

    Returns:
        without: (g, 2^(g-1)) long, the subsets not containing player i.
        with_i: (g, 2^(g-1)) long, the same subsets plus player i.
        weights: (g, 2^(g-1)) float64, |S|! (g - |S| - 1)! / g! for those subsets.
    """
    masks = torch.arange(1 << g)
    bits = (masks[:, None] >> torch.arange(g)) & 1  # (2^g, g)
    player_bit = (1 << torch.arange(g))[:, None]  # (g, 1)
    without = torch.stack([masks[bits[:, i] == 0] for i in range(g)])  # (g, 2^(g-1))
    sizes = bits.sum(-1)[without].double()  # (g, 2^(g-1))
    log_w = torch.lgamma(sizes + 1) + torch.lgamma(g - sizes) - math.lgamma(g + 1)
    return without, without | player_bit, torch.exp(log_w)


def _all_subset_logdets(matrix: torch.Tensor) -> torch.Tensor:
    """log det of every principal minor: (c, G, G) positive definite -> (c, 2^G), indexed by bitmask.

    Gaussian elimination down a binary tree: at level j every state is the Schur complement
    of the elements of S already eliminated (those of S below j), restricted to elements
    j..G-1. Player j is either skipped (drop its row and column) or eliminated (pivot
    added to the log-det, Schur update). Both children are stacked so that the child index
    is parent + 2^j * [j in S], i.e. the subset's bitmask. Cost per group is
    sum_j 2^j (G-j)^2 entries, about 9x fewer than factoring 2^G separate G x G matrices,
    and G vectorised steps instead of 2^G LAPACK calls.
    """
    g = matrix.shape[-1]
    state = matrix[:, None]  # (c, 1, G, G): the empty subset
    logdet = matrix.new_zeros(matrix.shape[0], 1)  # (c, 1)
    for _ in range(g):
        pivot = state[..., 0, 0]  # (c, 2^j)
        skip = state[..., 1:, 1:]
        # A wrong response has an exact identity row here, so `take` equals `skip` bit for bit
        # and its marginals are exactly 0.0.
        take = skip - state[..., 1:, 0, None] * (state[..., 0, None, 1:] / pivot[..., None, None])
        state = torch.cat([skip, take], dim=1)
        logdet = torch.cat([logdet, logdet + torch.log(pivot)], dim=1)
    return logdet


def _exact_shapley(gram: torch.Tensor, alpha: float) -> torch.Tensor:
    """Exact Shapley values (P_b, G) of f over each group, from its Gram matrix (P_b, G, G)."""
    num, g = gram.shape[0], gram.shape[-1]
    without, with_i, weights = (t.to(gram.device) for t in _exact_tables(g))
    eye = torch.eye(g, dtype=gram.dtype, device=gram.device)
    chunk = max(1, _CHUNK_ELEMENTS // (g << g))  # the (c, G, 2^(G-1)) marginals dominate memory
    shares = []
    for lo in range(0, num, chunk):  # memory chunks of groups, not a per-group loop
        f = _all_subset_logdets(eye + alpha * gram[lo : lo + chunk])  # f(S), (c, 2^G)
        marginal = f[:, with_i] - f[:, without]  # (c, G, 2^(G-1))
        shares.append((marginal * weights).sum(-1))
    return torch.cat(shares)


def _monte_carlo_shapley(
    gram: torch.Tensor, alpha: float, num_permutations: int, generator: torch.Generator
) -> torch.Tensor:
    """Permutation-sampling Shapley estimate (P_b, G); each permutation's marginals sum to f(group).

    The groups of a bucket share the same ``num_permutations`` random orderings: each
    group's estimate is still an average over independent uniform permutations, and one
    shared index turns the permutation of every Gram matrix into a single contiguous
    ``index_select`` instead of a per-element gather.
    """
    num, g = gram.shape[0], gram.shape[-1]
    # Drawn on CPU so a seed gives the same estimate on every device.
    perm = torch.argsort(torch.rand(num_permutations, g, generator=generator), dim=-1).to(
        gram.device
    )  # (M, G)
    flat = (perm[:, :, None] * g + perm[:, None, :]).reshape(-1)  # (M*G*G,) into a flattened G x G
    eye = torch.eye(g, dtype=gram.dtype, device=gram.device)
    chunk = max(1, _MC_CHUNK_ELEMENTS // (num_permutations * g * g))
    shares = []
    for lo in range(0, num, chunk):
        k = gram[lo : lo + chunk].reshape(-1, g * g).index_select(1, flat)
        k = k.reshape(-1, num_permutations, g, g)  # (c, M, G, G), rows and columns in permutation order
        chol = torch.linalg.cholesky(eye + alpha * k)  # I + aK is positive definite (eigenvalues >= 1)
        marginal = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1))  # (c, M, G), permuted order
        index = perm.expand(marginal.shape[0], -1, -1)
        phi = torch.zeros_like(marginal).scatter_(-1, index, marginal)  # back to player order
        shares.append(phi.mean(1))
    return torch.cat(shares)


# --------------------------------------------------------------------------- public API


def gcpo_shapley(
    embeddings: torch.Tensor,
    rewards: torch.Tensor,
    index: Sequence[Hashable] | torch.Tensor,
    *,
    alpha: float = GcpoConfig.alpha,
    exact_max_g: int = GcpoConfig.exact_max_g,
    num_permutations: int = GcpoConfig.num_permutations,
    seed: int = GcpoConfig.seed,
) -> torch.Tensor:
    """Shapley share of each response in its group's coverage f (SPEC section 8).

    Args:
        embeddings: (N, d) semantic embeddings (normalised to unit length here).
        rewards: (N,) outcome rewards; the correctness weight is max(r, 0).
        index: length-N prompt ids (verl's ``uid``); groups may have unequal sizes.
        alpha: coverage scale in f(S) = log det(I + alpha V_S V_S^T).
        exact_max_g: groups of size <= this are solved exactly over all subsets.
        num_permutations: Monte Carlo permutations per group above ``exact_max_g``.
        seed: seed of the Monte Carlo permutations (vary it per step).

    Returns:
        (N,) float32 shares on ``embeddings``' device; per group they sum to f(group),
        wrong responses (r <= 0) get exactly 0.
    """
    _check_inputs(embeddings, rewards, index)
    config = GcpoConfig(alpha=alpha, exact_max_g=exact_max_g, num_permutations=num_permutations)
    device = embeddings.device
    rewards = rewards.to(device)
    inverse, num_groups = group_inverse(index, device=device)
    generator = torch.Generator().manual_seed(int(seed))
    vectors = _weighted_vectors(embeddings, rewards)
    shares = torch.zeros(embeddings.shape[0], dtype=torch.float64, device=device)
    for table in _size_buckets(inverse, num_groups):
        gram = _group_gram(vectors, table)  # (P_b, G, G)
        if table.shape[1] <= config.exact_max_g:
            phi = _exact_shapley(gram, config.alpha)
        else:
            phi = _monte_carlo_shapley(gram, config.alpha, config.num_permutations, generator)
        shares[table] = phi
    # Null players are exactly 0 already; this also zeroes -0.0 and keeps the contract explicit.
    shares = torch.where(rewards > 0, shares, torch.zeros_like(shares))
    return shares.to(torch.float32)


def gcpo_advantages_from_shares(
    shares: torch.Tensor,
    rewards: torch.Tensor,
    index: Sequence[Hashable] | torch.Tensor,
    *,
    beta: float = GcpoConfig.beta,
    norm_adv_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """A_i = A^L_i(r) + beta * A^L_i(phi), both GRPO-normalised inside the group.

    Split from :func:`compute_gcpo_advantages` so a trainer that also logs the shares
    computes them once.

    Returns:
        (N,) float32 advantages on ``rewards``' device.
    """
    beta = GcpoConfig(beta=beta).beta
    if shares.shape != rewards.shape or shares.dim() != 1 or len(index) != shares.shape[0]:
        raise ValueError(
            f"length mismatch: shares {tuple(shares.shape)}, rewards {tuple(rewards.shape)}, index {len(index)}"
        )
    device = rewards.device
    inverse, num_groups = group_inverse(index, device=device)
    reward_adv, share_adv = (
        group_normalized_advantage(values, inverse, num_groups, norm_adv_by_std=norm_adv_by_std, eps=eps)
        for values in (rewards.float(), shares.to(device).float())
    )
    return (reward_adv + beta * share_adv).to(torch.float32)


def compute_gcpo_advantages(
    embeddings: torch.Tensor,
    rewards: torch.Tensor,
    index: Sequence[Hashable] | torch.Tensor,
    *,
    alpha: float = GcpoConfig.alpha,
    beta: float = GcpoConfig.beta,
    exact_max_g: int = GcpoConfig.exact_max_g,
    num_permutations: int = GcpoConfig.num_permutations,
    seed: int = GcpoConfig.seed,
    norm_adv_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GCPO advantage per response (SPEC section 8): reward GRPO advantage + beta * share GRPO advantage.

    Args: as :func:`gcpo_shapley`, plus ``beta`` (weight of the share term), ``norm_adv_by_std``
    (divide by the group std, as verl's ``algorithm.norm_adv_by_std_in_grpo``) and ``eps``.

    Returns:
        (N,) float32 advantages; an all-wrong group gets exactly 0.
    """
    shares = gcpo_shapley(
        embeddings,
        rewards,
        index,
        alpha=alpha,
        exact_max_g=exact_max_g,
        num_permutations=num_permutations,
        seed=seed,
    )
    return gcpo_advantages_from_shares(
        shares, rewards.to(shares.device), index, beta=beta, norm_adv_by_std=norm_adv_by_std, eps=eps
    )


def gcpo_metrics(
    shares: torch.Tensor,
    rewards: torch.Tensor,
    index: Sequence[Hashable] | torch.Tensor,
    *,
    alpha: float = GcpoConfig.alpha,
    redundant_tol: float = 0.5,
) -> dict[str, float]:
    """Batch statistics of GCPO shares.

    * ``coverage_mean``: mean over groups of f(group), read as the sum of the group's shares
      (Shapley efficiency makes the two equal, for the Monte Carlo estimate too).
    * ``uniqueness_mean``: mean over correct responses (r > 0) of phi_i / f({i}), where
      f({i}) = log(1 + alpha q_i^2) is what the response would cover alone. f is submodular,
      so the ratio lies in [0, 1]: 1 = orthogonal to its team, small = redundant.
    * ``frac_redundant_correct``: fraction of correct responses with uniqueness < ``redundant_tol``
      ("adds less than half of what it would add alone" by default). 0.0 when no response is correct.
    """
    if not 0.0 < redundant_tol <= 1.0:
        raise ValueError(f"redundant_tol must lie in (0, 1]; got {redundant_tol!r}")
    device = shares.device
    inverse, num_groups = group_inverse(index, device=device)
    shares64 = shares.to(torch.float64)
    coverage = group_reduce(shares64, inverse, num_groups, "sum")
    q = rewards.to(device=device, dtype=torch.float64).clamp_min(0.0)
    correct = q > 0
    standalone = torch.log1p(alpha * q * q)  # f({i}) for a unit embedding
    uniqueness = shares64[correct] / standalone[correct]
    n_correct = int(correct.sum())
    return {
        COVERAGE_MEAN: float(coverage.mean()),
        UNIQUENESS_MEAN: float(uniqueness.mean()) if n_correct else 0.0,
        FRAC_REDUNDANT_CORRECT: float((uniqueness < redundant_tol).double().mean()) if n_correct else 0.0,
    }
