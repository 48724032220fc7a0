"""recipe.stats (paired t, Holm, two-level bootstrap, power) against published tables and independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recipe import stats as paired


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.706205),
        (0.975, 4, 2.776445),
        (0.975, 19, 2.093024),
        (0.95, 10, 1.812461),
        (0.8, 19, 0.860951),
    ],
)
def test_t_quantiles_match_the_table(p: float, df: int, expected: float) -> None:
    assert paired.t_quantile(p, df) == pytest.approx(expected, abs=1e-5)
    assert paired.t_quantile(1 - p, df) == pytest.approx(-expected, abs=1e-5)


def test_t_cdf_of_one_degree_of_freedom_is_the_cauchy_cdf() -> None:
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert paired.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-10)


def test_t_cdf_approaches_the_normal_cdf() -> None:
    for t in (-2.0, 0.3, 1.96):
        assert paired.t_cdf(t, 1e6) == pytest.approx(0.5 * (1 + math.erf(t / math.sqrt(2))), abs=1e-5)


def test_paired_t_by_hand() -> None:
    d = [0.1, 0.3, -0.1, 0.2, 0.5]
    result = paired.paired_t(d)
    mean, sd = float(np.mean(d)), float(np.std(d, ddof=1))
    half = 2.776445 * sd / math.sqrt(5)
    assert (result.mean, result.sd) == (pytest.approx(mean), pytest.approx(sd))
    assert (result.low, result.high) == (
        pytest.approx(mean - half, abs=1e-6),
        pytest.approx(mean + half, abs=1e-6),
    )
    t = mean / (sd / math.sqrt(5))
    assert result.p == pytest.approx(2 * (1 - paired.t_cdf(t, 4)))
    assert 0.05 < result.p < 0.2  # t = 1.96 on 4 df


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert paired.holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert paired.holm([0.5, 0.9]) == [1.0, 1.0]


def test_two_level_bootstrap_of_a_seed_only_effect_matches_the_seed_bootstrap() -> None:
    rng = np.random.default_rng(3)
    per_seed = rng.normal(0.02, 0.03, size=20)
    matrix = np.repeat(per_seed[:, None], 50, axis=1)  # problems carry no variation
    mean, low, high = paired.two_level_bootstrap(matrix, resamples=20_000, seed=1)
    boot = rng.choice(per_seed, size=(20_000, 20)).mean(axis=1)
    assert mean == pytest.approx(per_seed.mean())
    assert low == pytest.approx(np.percentile(boot, 2.5), abs=0.002)
    assert high == pytest.approx(np.percentile(boot, 97.5), abs=0.002)


def test_two_level_bootstrap_widens_with_problem_variation() -> None:
    rng = np.random.default_rng(4)
    seed_effect = rng.normal(0.0, 0.01, size=(20, 1))
    narrow = paired.two_level_bootstrap(seed_effect + np.zeros((20, 200)), resamples=4000)
    wide = paired.two_level_bootstrap(seed_effect + rng.normal(0, 0.5, size=(1, 200)), resamples=4000)
    assert (wide[2] - wide[1]) > 2 * (narrow[2] - narrow[1])


def test_power_at_zero_effect_is_alpha_and_mde_matches_gpower() -> None:
    assert paired.noncentral_t_power(0.0, 19) == pytest.approx(0.05, abs=1e-6)
    # G*Power, paired t-test two-sided alpha 0.05, power 0.80: n = 20 -> dz = 0.6604, n = 10 -> dz = 0.9940
    assert paired.minimum_detectable_effect(1.0, 20) == pytest.approx(0.6604, abs=2e-3)
    assert paired.minimum_detectable_effect(2.0, 10) == pytest.approx(2 * 0.9940, abs=5e-3)


def test_power_by_simulation() -> None:
    rng = np.random.default_rng(0)
    n, effect = 12, 0.7
    crit = paired.t_quantile(0.975, n - 1)
    samples = rng.normal(effect, 1.0, size=(40_000, n))
    t = samples.mean(1) / (samples.std(1, ddof=1) / math.sqrt(n))
    simulated = float(np.mean(np.abs(t) > crit))
    assert paired.noncentral_t_power(effect * math.sqrt(n), n - 1) == pytest.approx(simulated, abs=0.01)
