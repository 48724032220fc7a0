"""The project's statistics: percentile-bootstrap intervals, paired differences, McNemar's exact test,
and per-run curve summaries. One home for every interval and p-value the studies and the quickstart print.

Studies (``recipe/study/``): every run of a study is one (method, seed) pair with a validation curve:
accuracy at fixed steps, step 0 included. Each run is reduced to three numbers:

* final accuracy: the accuracy at the last validated step;
* area under the curve (AUC): the trapezoid integral of accuracy over steps divided by the step span,
  i.e. the run's mean accuracy over training (same units as accuracy; rewards learning early);
* steps to threshold: the first validated step whose accuracy reaches the threshold. A run that never
  reaches it is *censored*: it gets ``censored_value`` (by convention the budget plus one validation
  interval, a bound that is smaller than its true value) and is counted apart, so a mean over runs
  with censored members is a lower bound, and the report says how many were censored.

A method's statistic is the mean over its seeds with a percentile-bootstrap 95% CI (seeds resampled
with replacement). A method is compared with the baseline by the paired difference, seed by seed
(same seed = same data order, same initial model, same rollout seeds), with the bootstrap CI of the
mean difference. "Significant" below means only that this CI excludes 0.

The quickstart (``recipe/quickstart/``) compares validation before and after training over the same
prompts: the bootstrap CI of the mean per-prompt difference, and :func:`mcnemar_p` on the prompts
fixed and broken.

Pre-registered comparisons (the testbed v2 study, ``recipe/study/testbed2``), pure numpy and the
standard library (no scipy in the project's environment):

* Student's t distribution: :func:`t_cdf` through the regularised incomplete beta function
  (Numerical Recipes' continued fraction), :func:`t_quantile` by bisection on it;
* :func:`paired_t`: mean paired difference, its t-interval and two-sided p-value;
* :func:`holm`: Holm's step-down adjusted p-values (family-wise error at alpha);
* :func:`two_level_bootstrap`: a percentile interval for the mean of a (seeds x problems) matrix of
  paired differences, resampling seeds and problems independently (both are random samples: seeds of
  training randomness, problems of the task distribution);
* :func:`minimum_detectable_effect`: the smallest mean paired difference a two-sided paired t-test
  detects with the given power, from the noncentral t distribution (numerical integration over the
  chi-square of the sample variance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values and its bootstrap CI ``[low, high]`` (NaN when ``n`` is 0)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        """The CI lies strictly on one side of 0. False when undefined, and with one value: its
        "interval" is the value itself, which says nothing about the spread."""
        return bool(self.n >= 2 and (self.low > 0 or self.high < 0))


def bootstrap_means(values: Sequence[float], resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Means of ``resamples`` bootstrap resamples of ``values`` (each resample: n draws with replacement).

    Args:
        values: (n,) observations, n >= 1.
        resamples: number of bootstrap resamples B.
        seed: seed of ``numpy.random.default_rng``; the draws are one (B, n) array of indices.

    Returns:
        (B,) resample means.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"bootstrap needs a non-empty 1-d sequence of values, got shape {x.shape}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    return x[idx].mean(axis=1)


def bootstrap_ci(
    values: Sequence[float],
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """Mean of ``values`` and its percentile-bootstrap CI at ``confidence`` (NaN CI for no values).

    The CI is ``numpy.percentile`` (linear interpolation) of the resample means at
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``. With one value the CI is that value.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = [float(v) for v in values]
    if not x:
        return Interval(math.nan, math.nan, math.nan, 0)
    if any(not math.isfinite(v) for v in x):
        raise ValueError(f"bootstrap_ci: non-finite value in {x}")
    means = bootstrap_means(x, resamples, seed)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(np.mean(x)), float(low), float(high), len(x))


def paired_differences(
    treatment: Mapping[int, float], baseline: Mapping[int, float]
) -> tuple[list[int], list[float]]:
    """Seeds present in both runs' results, sorted, and ``treatment[s] - baseline[s]`` for each."""
    seeds = sorted(set(treatment) & set(baseline))
    return seeds, [float(treatment[s]) - float(baseline[s]) for s in seeds]


def auc(steps: Sequence[float], accuracy: Sequence[float]) -> float:
    """Trapezoid area under ``accuracy`` over ``steps``, divided by the step span (a mean accuracy).

    Args:
        steps: (m,) strictly increasing validated steps, m >= 2.
        accuracy: (m,) accuracy at those steps.
    """
    s = np.asarray(steps, dtype=np.float64)
    a = np.asarray(accuracy, dtype=np.float64)
    if s.shape != a.shape or s.ndim != 1 or s.size < 2:
        raise ValueError(f"auc needs two equal-length curves of >= 2 points, got {s.shape} and {a.shape}")
    if np.any(np.diff(s) <= 0):
        raise ValueError(f"auc: steps must be strictly increasing, got {list(s)}")
    area = float(np.sum((a[1:] + a[:-1]) / 2 * np.diff(s)))
    return area / float(s[-1] - s[0])


def steps_to_threshold(steps: Sequence[float], accuracy: Sequence[float], threshold: float) -> float | None:
    """The first validated step with ``accuracy >= threshold``, or None when the run never reaches it."""
    for step, acc in zip(steps, accuracy, strict=True):
        if acc >= threshold:
            return float(step)
    return None


def mcnemar_p(improved: int, worsened: int) -> float:
    """Exact two-sided McNemar p-value of paired binary outcomes: the discordant pairs against Binomial(k, 1/2).

    Args:
        improved: pairs wrong before and right after.
        worsened: pairs right before and wrong after (concordant pairs do not enter).
    """
    if improved < 0 or worsened < 0:
        raise ValueError(f"mcnemar_p needs counts >= 0, got {improved} and {worsened}")
    k = improved + worsened
    if k == 0:
        return 1.0
    tail = sum(math.comb(k, i) for i in range(min(improved, worsened) + 1)) / 2**k
    return min(1.0, 2 * tail)


# -- paired t-tests, Holm, two-level bootstrap, power --------------------------------------------

_EPS = 1e-15
_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_cdf: df must be > 0, got {df}")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_cdf` to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1), got {p}")
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class PairedT:
    """Mean of n paired differences, its (1 - alpha) t-interval and two-sided p-value (H0: mean 0)."""

    mean: float
    low: float
    high: float
    p: float
    n: int
    sd: float


def paired_t(differences: Sequence[float], alpha: float = 0.05) -> PairedT:
    """The paired t-test of ``differences`` (treatment - control, one per seed)."""
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"paired_t needs >= 2 differences, got shape {d.shape}")
    n, mean, sd = d.size, float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = t_quantile(1.0 - alpha / 2.0, n - 1) * se
    p = (1.0 if mean == 0.0 else 0.0) if se == 0.0 else 2.0 * (1.0 - t_cdf(abs(mean) / se, n - 1))
    return PairedT(mean, mean - half, mean + half, min(1.0, p), n, sd)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (reject where adjusted p <= alpha)."""
    p = list(map(float, p_values))
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted = [0.0] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def two_level_bootstrap(
    differences: np.ndarray,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
    chunk: int = 1000,
) -> tuple[float, float, float]:
    """Mean of a (S seeds, P problems) difference matrix and its two-level percentile-bootstrap interval.

    Each resample draws S seeds and P problems with replacement, independently, and takes the mean
    of the selected cells (a seed drawn twice counts twice, likewise a problem). Returns
    ``(mean, low, high)``.
    """
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 2 or min(d.shape) < 1:
        raise ValueError(f"two_level_bootstrap needs a (seeds, problems) matrix, got shape {d.shape}")
    n_seeds, n_problems = d.shape
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        seed_counts = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=size)  # (B, S)
        problem_counts = rng.multinomial(
            n_problems, np.full(n_problems, 1.0 / n_problems), size=size
        )  # (B, P)
        per_seed = problem_counts @ d.T  # (B, S): sum over the drawn problems, per seed
        stats[start : start + size] = (per_seed * seed_counts).sum(axis=1) / (n_seeds * n_problems)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(stats, [tail, 100.0 - tail])
    return float(d.mean()), float(low), float(high)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    from math import erf, sqrt

    return 0.5 * (1.0 + np.vectorize(erf)(x / sqrt(2.0)))


def noncentral_t_power(ncp: float, df: int, alpha: float = 0.05) -> float:
    """Power of the two-sided t-test at level ``alpha``: P(|T'| > t_crit), T' noncentral t(df, ncp).

    P(T' <= x) = E[Phi(x sqrt(U / df) - ncp)] with U ~ chi-square(df), integrated on a grid of U.
    """
    crit = t_quantile(1.0 - alpha / 2.0, df)
    u = np.linspace(1e-6, df + 40.0 * math.sqrt(2.0 * df) + 40.0, 20001)
    log_pdf = (df / 2.0 - 1.0) * np.log(u) - u / 2.0 - (df / 2.0) * math.log(2.0) - math.lgamma(df / 2.0)
    weights = np.exp(log_pdf)
    weights /= weights.sum()
    scale = np.sqrt(u / df)
    upper = 1.0 - float((_normal_cdf(crit * scale - ncp) * weights).sum())
    lower = float((_normal_cdf(-crit * scale - ncp) * weights).sum())
    return upper + lower


def minimum_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.80) -> float:
    """Smallest mean paired difference that a two-sided paired t-test on ``n`` pairs detects with
    probability ``power``, when the differences have standard deviation ``sd``."""
    if n < 2 or sd < 0:
        raise ValueError(f"minimum_detectable_effect: need n >= 2 and sd >= 0, got n={n}, sd={sd}")
    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if noncentral_t_power(mid, n - 1, alpha) < power:
            lo = mid
        else:
            hi = mid
    return hi * sd / math.sqrt(n)
