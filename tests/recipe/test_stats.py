"""recipe/stats.py against independent computations: loops, exact enumeration, hand-checked cases."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from recipe import stats


def _percentile_loop(sorted_values: list[float], q: float) -> float:
    """numpy's default ('linear') percentile, written out: rank q/100 * (n - 1), interpolate neighbours."""
    rank = q / 100 * (len(sorted_values) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (rank - lo) * (sorted_values[hi] - sorted_values[lo])


def _bootstrap_loop(values: list[float], resamples: int, seed: int) -> list[float]:
    """One resample at a time from the same generator: row b of the vectorised (B, n) draw."""
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(resamples):
        idx = rng.integers(0, len(values), size=len(values))
        means.append(sum(values[int(i)] for i in idx) / len(values))
    return means


def test_bootstrap_means_equal_a_loop_with_the_same_draws() -> None:
    values = [0.31, 0.42, 0.18, 0.55, 0.47, 0.29, 0.38, 0.51]
    vectorised = stats.bootstrap_means(values, resamples=500, seed=7)
    assert vectorised == pytest.approx(_bootstrap_loop(values, 500, 7), abs=1e-12)


def test_bootstrap_ci_equals_loop_percentiles() -> None:
    values = [0.1, -0.05, 0.2, 0.0, 0.15, 0.05, -0.1, 0.25]
    ci = stats.bootstrap_ci(values, resamples=2000, seed=3)
    means = sorted(_bootstrap_loop(values, 2000, 3))
    assert ci.mean == pytest.approx(sum(values) / len(values))
    assert ci.low == pytest.approx(_percentile_loop(means, 2.5), abs=1e-12)
    assert ci.high == pytest.approx(_percentile_loop(means, 97.5), abs=1e-12)
    assert ci.n == len(values)


def test_two_values_hand_checked() -> None:
    # Resample means of {0, 1}: 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4, so the 2.5% and 97.5%
    # points are 0 and 1 (each end has 25% >> 2.5% of the mass).
    ci = stats.bootstrap_ci([0.0, 1.0], resamples=4000, seed=0)
    assert (ci.mean, ci.low, ci.high) == (0.5, 0.0, 1.0)
    assert not ci.excludes_zero


def test_ci_matches_the_exact_bootstrap_distribution() -> None:
    # n = 4: all 4^4 resamples are equally likely; the Monte Carlo CI must land on the exact quantiles.
    values = [0.0, 0.1, 0.3, 0.8]
    exact = sorted(sum(c) / 4 for c in itertools.product(values, repeat=4))
    ci = stats.bootstrap_ci(values, resamples=200_000, seed=11)
    grid = 0.025  # resample means are multiples of 0.025 here
    assert abs(ci.low - _percentile_loop(exact, 2.5)) <= grid + 1e-9
    assert abs(ci.high - _percentile_loop(exact, 97.5)) <= grid + 1e-9


def test_degenerate_inputs() -> None:
    one = stats.bootstrap_ci([0.4])
    assert (one.mean, one.low, one.high, one.n) == (0.4, 0.4, 0.4, 1)
    # One seed has no spread: its zero-width "interval" must never be read as significant.
    assert not one.excludes_zero
    assert stats.bootstrap_ci([0.4, 0.4]).excludes_zero  # two seeds that agree: every resample is 0.4
    none = stats.bootstrap_ci([])
    assert none.n == 0 and math.isnan(none.mean) and not none.excludes_zero
    assert stats.bootstrap_ci([0.2, 0.3, 0.1]).excludes_zero  # every resample mean > 0
    assert not stats.bootstrap_ci([-0.2, 0.3, 0.1]).excludes_zero
    with pytest.raises(ValueError, match="non-finite"):
        stats.bootstrap_ci([0.1, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        stats.bootstrap_ci([0.1], confidence=1.0)
    with pytest.raises(ValueError, match="non-empty"):
        stats.bootstrap_means([])


def test_paired_differences_pair_by_seed() -> None:
    seeds, diffs = stats.paired_differences({0: 0.5, 1: 0.7, 3: 0.2}, {1: 0.6, 0: 0.4, 2: 0.9})
    assert seeds == [0, 1]
    assert diffs == pytest.approx([0.1, 0.1])


def test_auc_hand_checked_and_against_numpy() -> None:
    # trapezoids (0.2 + 0.4) / 2 * 5 + (0.4 + 0.4) / 2 * 5 = 3.5 over 10 steps
    assert stats.auc([0, 5, 10], [0.2, 0.4, 0.4]) == pytest.approx(0.35)
    steps, acc = [0, 5, 10, 20, 30], [0.1, 0.3, 0.2, 0.6, 0.5]
    assert stats.auc(steps, acc) == pytest.approx(np.trapezoid(acc, steps) / 30)
    assert stats.auc([0, 10], [0.3, 0.3]) == pytest.approx(0.3)  # a flat curve's mean is its value
    with pytest.raises(ValueError, match="increasing"):
        stats.auc([0, 5, 5], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=">= 2 points"):
        stats.auc([0], [0.1])


def test_steps_to_threshold() -> None:
    steps, acc = [0, 5, 10, 15], [0.30, 0.33, 0.36, 0.34]
    assert stats.steps_to_threshold(steps, acc, 0.35) == 10.0
    assert stats.steps_to_threshold(steps, acc, 0.33) == 5.0  # reaching counts (>=)
    assert stats.steps_to_threshold(steps, acc, 0.40) is None


def test_paired_before_after_interval_and_mcnemar_against_direct_computations() -> None:
    """What the quickstart reports: the bootstrap CI of per-prompt differences, and McNemar's exact p."""
    before = [0.0] * 30 + [1.0] * 10
    after = [1.0] * 12 + [0.0] * 18 + [1.0] * 8 + [0.0] * 2  # 12 fixed, 2 broken of 40
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    interval = stats.bootstrap_ci(diffs, resamples=20000, seed=1)
    assert interval.mean == (12 - 2) / 40
    # normal approximation of the same interval: the bootstrap's should be close to it
    sd = math.sqrt(sum((d - interval.mean) ** 2 for d in diffs) / len(diffs))
    half = 1.96 * sd / math.sqrt(len(diffs))
    assert abs(interval.low - (interval.mean - half)) < 0.03
    assert abs(interval.high - (interval.mean + half)) < 0.03
    assert interval.excludes_zero
    # exact binomial tail: P(X <= 2 | X ~ Bin(14, 1/2)) doubled
    assert stats.mcnemar_p(12, 2) == pytest.approx(2 * (1 + 14 + 91) / 2**14)
    assert stats.mcnemar_p(2, 12) == stats.mcnemar_p(12, 2)
    assert stats.mcnemar_p(0, 0) == 1.0 and stats.mcnemar_p(5, 5) == 1.0
    with pytest.raises(ValueError, match=">= 0"):
        stats.mcnemar_p(-1, 3)


@pytest.mark.parametrize("improved,worsened", [(25, 1), (0, 7), (3, 4), (40, 31), (1, 0), (6, 6)])
def test_mcnemar_p_equals_the_exact_binomial_test_by_enumeration(improved: int, worsened: int) -> None:
    """The two-sided exact binomial test as scipy.stats.binomtest defines it: the total probability of
    every outcome no more likely than the one observed, under Binomial(k, 1/2), enumerated."""
    k = improved + worsened
    pmf = [math.comb(k, x) / 2**k for x in range(k + 1)]
    observed = pmf[improved]
    expected = sum(p for p in pmf if p <= observed * (1 + 1e-7))
    assert stats.mcnemar_p(improved, worsened) == pytest.approx(min(1.0, expected), rel=1e-12)
