"""GCPO math (copo_core.gcpo) against slow, independent references.

The references enumerate subsets / permutations in Python loops and evaluate coverage
through the d x d form log det(I_d + alpha V_S^T V_S) (Sylvester's identity), a different
computation from the G x G Gram minors the vectorised code uses.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from copo_core.gcpo import (
    compute_gcpo_advantages,
    gcpo_advantages_from_shares,
    gcpo_metrics,
    gcpo_shapley,
)
from tests.copo_core.reference import ref_coverage, ref_gcpo_coverage, ref_weighted

# --------------------------------------------------------------------------- slow references


def ref_shapley_group(vectors: torch.Tensor, alpha: float) -> list[float]:
    """Exact Shapley by the subset formula, one player and one subset at a time."""
    g = vectors.shape[0]
    players = range(g)
    phi = []
    for i in players:
        others = [j for j in players if j != i]
        total = 0.0
        for size in range(g):
            weight = math.factorial(size) * math.factorial(g - size - 1) / math.factorial(g)
            for subset in itertools.combinations(others, size):
                with_i = tuple(sorted((*subset, i)))
                total += weight * (
                    ref_coverage(vectors, with_i, alpha) - ref_coverage(vectors, subset, alpha)
                )
        phi.append(total)
    return phi


def ref_shapley_by_permutations(vectors: torch.Tensor, alpha: float) -> list[float]:
    """Exact Shapley as the average marginal over all G! orderings (the definition)."""
    g = vectors.shape[0]
    phi = [0.0] * g
    orders = list(itertools.permutations(range(g)))
    for order in orders:
        for k, player in enumerate(order):
            phi[player] += ref_coverage(vectors, tuple(sorted(order[: k + 1])), alpha) - ref_coverage(
                vectors, tuple(sorted(order[:k])), alpha
            )
    return [p / len(orders) for p in phi]


def ref_grpo(values: list[float], eps: float, norm: bool) -> list[float]:
    """verl's GRPO convention: a group of one has mean 0 and std 1."""
    if len(values) == 1:
        mean, std = 0.0, 1.0
    else:
        mean = sum(values) / len(values)
        std = math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1))
    return [(x - mean) / (std + eps) if norm else x - mean for x in values]


def random_batch(sizes: list[int], d: int, seed: int, *, real_rewards: bool = False):
    """Shuffled batch with the given group sizes; returns embeddings, rewards, uid list."""
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    uids = [f"p{j}" for j, size in enumerate(sizes) for _ in range(size)]
    perm = torch.randperm(n, generator=gen).tolist()
    uids = [uids[p] for p in perm]  # interleaved groups, as after verl's balancing
    emb = torch.randn(n, d, generator=gen)
    # Real-valued rewards: the negative ones are wrong (q = 0).
    rewards = torch.randn(n, generator=gen) if real_rewards else (torch.rand(n, generator=gen) < 0.6).float()
    return emb, rewards, uids


def members(uids: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, u in enumerate(uids):
        out.setdefault(u, []).append(i)
    return out


# --------------------------------------------------------------------------- tests


def test_reference_subset_and_permutation_forms_agree():
    emb, rewards, _ = random_batch([5], 7, seed=1)
    v = ref_weighted(emb, torch.ones(5))
    assert ref_shapley_group(v, 0.7) == pytest.approx(ref_shapley_by_permutations(v, 0.7), abs=1e-10)


@pytest.mark.parametrize("alpha", [0.3, 1.0, 4.0])
def test_exact_matches_loop_reference_unequal_groups(alpha):
    emb, rewards, uids = random_batch([1, 2, 3, 5, 6, 5, 3, 7], d=9, seed=2, real_rewards=True)
    shares = gcpo_shapley(emb, rewards, uids, alpha=alpha)
    assert shares.dtype == torch.float32 and shares.shape == rewards.shape
    v = ref_weighted(emb, rewards)
    for idx in members(uids).values():
        expected = ref_shapley_group(v[idx], alpha)
        assert shares[idx].double().tolist() == pytest.approx(expected, abs=1e-5)


def test_exact_g8_matches_reference_and_numeric_index():
    emb, rewards, uids = random_batch([8, 8, 8], d=16, seed=3)
    numeric = torch.tensor([int(u[1:]) for u in uids])
    shares = gcpo_shapley(emb, rewards, numeric)
    assert torch.equal(shares, gcpo_shapley(emb, rewards, uids))
    v = ref_weighted(emb, rewards)
    idx = members(uids)["p1"]
    assert shares[idx].double().tolist() == pytest.approx(ref_shapley_group(v[idx], 1.0), abs=1e-5)


@pytest.mark.parametrize("exact_max_g", [10, 0])
def test_efficiency_sum_of_shares_is_group_coverage(exact_max_g):
    emb, rewards, uids = random_batch([8, 4, 12, 1, 9], d=12, seed=4, real_rewards=True)
    shares = gcpo_shapley(emb, rewards, uids, alpha=1.5, exact_max_g=exact_max_g, num_permutations=8)
    v = ref_weighted(emb, rewards)
    for idx in members(uids).values():
        f_group = ref_coverage(v[idx], tuple(range(len(idx))), 1.5)
        assert float(shares[idx].double().sum()) == pytest.approx(f_group, abs=1e-5)


@pytest.mark.parametrize("exact_max_g", [10, 0])
def test_symmetry_identical_responses_get_identical_shares(exact_max_g):
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(4, 10, generator=gen)
    emb = torch.cat([base, base[:1], base[:1], base[2:3]])  # responses 0, 4, 5 identical; 2 and 6 identical
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    uids = ["a"] * 7
    shares = gcpo_shapley(emb, rewards, uids, exact_max_g=exact_max_g, num_permutations=20000)
    tol = 1e-6 if exact_max_g else 0.01  # Monte Carlo only approaches symmetry
    assert shares[4].item() == pytest.approx(shares[0].item(), abs=tol)
    assert shares[5].item() == pytest.approx(shares[0].item(), abs=tol)
    assert shares[6].item() == pytest.approx(shares[2].item(), abs=tol)


@pytest.mark.parametrize("exact_max_g", [10, 0])
def test_null_player_wrong_responses_get_exactly_zero(exact_max_g):
    emb, _, uids = random_batch([6, 6, 13], d=8, seed=6)
    rewards = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.0, 2.0] * 4 + [0.0])
    shares = gcpo_shapley(emb, rewards, uids, exact_max_g=exact_max_g, num_permutations=16)
    wrong = rewards <= 0
    assert (shares[wrong] == 0.0).all()
    assert (shares[~wrong] > 0).all()


def test_monte_carlo_error_shrinks_with_more_permutations():
    emb, rewards, uids = random_batch([9] * 12, d=6, seed=7, real_rewards=True)
    exact = gcpo_shapley(emb, rewards, uids, exact_max_g=10).double()

    def mean_error(m: int) -> float:
        errs = [
            (gcpo_shapley(emb, rewards, uids, exact_max_g=0, num_permutations=m, seed=s).double() - exact)
            .abs()
            .mean()
            for s in range(3)
        ]
        return float(sum(errs) / len(errs))

    coarse, medium, fine = mean_error(8), mean_error(128), mean_error(2048)
    # Standard error scales as 1/sqrt(M): each 16x step should cut it ~4x; demand 2x.
    assert medium < coarse / 2
    assert fine < medium / 2
    assert fine < 5e-3


def test_monte_carlo_is_seeded():
    emb, rewards, uids = random_batch([16] * 4, d=8, seed=8)
    a = gcpo_shapley(emb, rewards, uids, num_permutations=8, seed=3)
    b = gcpo_shapley(emb, rewards, uids, num_permutations=8, seed=3)
    c = gcpo_shapley(emb, rewards, uids, num_permutations=8, seed=4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_duplicated_correct_response_earns_less_than_unique():
    gen = torch.Generator().manual_seed(9)
    a, b, c = torch.randn(3, 32, generator=gen)
    emb = torch.stack([a, a, b, c, c + 0.01 * torch.randn(32, generator=gen)])
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0])
    shares = gcpo_shapley(emb, rewards, ["g"] * 5)
    # a is duplicated, b is unique; the near-copy of the wrong c is alone among correct ones.
    assert shares[0] < shares[2]
    assert shares[1] < shares[2]
    assert shares[0] == pytest.approx(shares[1].item(), abs=1e-6)


def test_all_wrong_group_gets_zero_advantage():
    emb, _, uids = random_batch([4, 4], d=8, seed=10)
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    wrong_group = [i for i, u in enumerate(uids) if u == "p0"]
    rewards[wrong_group] = 0.0
    adv = compute_gcpo_advantages(emb, rewards, uids)
    assert (adv[wrong_group] == 0.0).all()
    assert adv.abs().sum() > 0


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.25])
def test_advantage_matches_loop_reference(norm, beta):
    emb, rewards, uids = random_batch([1, 3, 8, 8, 11], d=10, seed=11, real_rewards=True)
    adv = compute_gcpo_advantages(
        emb, rewards, uids, alpha=0.8, beta=beta, num_permutations=32, seed=5, norm_adv_by_std=norm
    )
    shares = gcpo_shapley(emb, rewards, uids, alpha=0.8, num_permutations=32, seed=5)
    v = ref_weighted(emb, rewards)
    for idx in members(uids).values():
        phi = ref_shapley_group(v[idx], 0.8) if len(idx) <= 10 else shares[idx].double().tolist()
        r_adv = ref_grpo(rewards[idx].double().tolist(), 1e-6, norm)
        p_adv = ref_grpo(phi, 1e-6, norm)
        expected = [x + beta * y for x, y in zip(r_adv, p_adv, strict=True)]
        assert adv[idx].double().tolist() == pytest.approx(expected, abs=2e-4)


def test_metrics_against_direct_computation():
    gen = torch.Generator().manual_seed(12)
    eye = torch.eye(6)
    same = torch.randn(1, 6, generator=gen).expand(8, 6)
    emb = torch.cat([eye[:4], same])  # group a: 4 orthogonal; group b: 8 identical
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0] + [1.0] * 8)
    uids = ["a"] * 4 + ["b"] * 8
    shares = gcpo_shapley(emb, rewards, uids)
    m = gcpo_metrics(shares, rewards, uids, redundant_tol=0.5)
    cov = ref_gcpo_coverage(emb, rewards, uids, alpha=1.0)
    assert m["coverage_mean"] == pytest.approx((cov[0] + cov[4]) / 2, abs=1e-5)
    assert cov[0] == pytest.approx(3 * math.log(2), abs=1e-6)  # 3 orthogonal unit vectors
    assert cov[4] == pytest.approx(math.log(9), abs=1e-5)  # 8 copies: log(1 + 8)
    # orthogonal: uniqueness 1; 8 copies: log(9) / (8 log 2) ~ 0.40 < 0.5 -> redundant
    copies = math.log(9) / (8 * math.log(2))
    assert m["uniqueness_mean"] == pytest.approx((3 * 1.0 + 8 * copies) / 11, abs=1e-5)
    assert m["frac_redundant_correct"] == pytest.approx(8 / 11)
    none_right = gcpo_metrics(torch.zeros(4), torch.zeros(4), ["x"] * 4)
    assert none_right == {"coverage_mean": 0.0, "uniqueness_mean": 0.0, "frac_redundant_correct": 0.0}


def test_advantages_from_shares_equals_compute():
    emb, rewards, uids = random_batch([8, 8], d=8, seed=13)
    shares = gcpo_shapley(emb, rewards, uids)
    assert torch.equal(
        gcpo_advantages_from_shares(shares, rewards, uids, beta=0.5),
        compute_gcpo_advantages(emb, rewards, uids, beta=0.5),
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"exact_max_g": 21}, "exact_max_g"),
        ({"num_permutations": 0}, "num_permutations"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, match):
    emb, rewards, uids = random_batch([4], d=4, seed=14)
    with pytest.raises(ValueError, match=match):
        gcpo_shapley(emb, rewards, uids, **kwargs)


def test_bad_inputs_raise():
    emb, rewards, uids = random_batch([4], d=4, seed=15)
    with pytest.raises(ValueError, match="length mismatch"):
        gcpo_shapley(emb, rewards, uids[:3])
    with pytest.raises(ValueError, match="rewards"):
        gcpo_shapley(emb, torch.tensor([1.0, float("nan"), 0.0, 1.0]), uids)
    with pytest.raises(ValueError, match="embeddings"):
        gcpo_shapley(emb[0], rewards, uids)
    with pytest.raises(ValueError, match="empty"):
        gcpo_shapley(torch.zeros(0, 4), torch.zeros(0), [])
    with pytest.raises(ValueError, match="beta"):
        compute_gcpo_advantages(emb, rewards, uids, beta=float("inf"))


def test_estimators_give_null_players_exact_zero_before_any_masking():
    """The public function also masks wrong responses; the math itself must already give 0.0."""
    from copo_core.gcpo import _exact_shapley, _monte_carlo_shapley

    gen = torch.Generator().manual_seed(16)
    v = torch.randn(5, 9, 12, generator=gen, dtype=torch.float64)
    q = (torch.rand(5, 9, generator=gen) < 0.5).double()
    q[:, 0] = 1.0
    v = v / v.norm(dim=-1, keepdim=True) * q[..., None]
    gram = v @ v.transpose(-1, -2)
    for phi in (
        _exact_shapley(gram, 1.3),
        _monte_carlo_shapley(gram, 1.3, 16, torch.Generator().manual_seed(0)),
    ):
        assert (phi[q == 0] == 0.0).all()
        assert (phi[q == 1] > 0).all()
