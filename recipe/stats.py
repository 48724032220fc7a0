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
