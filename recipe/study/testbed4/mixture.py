"""The regime map's one knob: a target share of all-wrong groups at step 0 -> the level mixture.

Each level ``l`` of the task has a measured all-wrong rate ``a_l``: the share of its problems whose G
samples from the step-0 policy are all wrong. A mixture ``w`` of the levels (the share of each level
in the training and validation problems) has the expected all-wrong share ``sum_l w_l a_l``. Many
mixtures reach one target; the knob takes the one of maximum entropy (the most even spread over the
levels, so every regime keeps every level and with it solved, learnable and unsolved prompts). That
mixture is an exponential tilt of the uniform one, ``w_l ~ exp(theta a_l)``, and its expected share
rises monotonically with ``theta`` (its derivative is the variance of ``a`` under ``w``), so one
bisection on ``theta`` finds it. Nothing is hand-tuned: the weights follow from the target and the
measured rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

_BRACKET = 200.0  # |theta| beyond which the tilt is numerically a point mass (rates differ by >= 1e-3)


def tilted(rates: Sequence[float], theta: float) -> list[float]:
    """The mixture ``w_l ~ exp(theta a_l)`` (normalised; computed stably)."""
    top = max(theta * a for a in rates)
    raw = [math.exp(theta * a - top) for a in rates]
    total = sum(raw)
    return [r / total for r in raw]


def expected_share(weights: Sequence[float], rates: Sequence[float]) -> float:
    """The all-wrong share of a mixture: ``sum_l w_l a_l``."""
    return sum(w * a for w, a in zip(weights, rates, strict=True))


def max_entropy_mixture(rates: Sequence[float], target: float, tol: float = 1e-12) -> list[float]:
    """The maximum-entropy level mixture whose expected all-wrong share is ``target``.

    Raises:
        ValueError: ``target`` is not strictly between the smallest and the largest rate (no mixture
            with every level present reaches it), or the rates are not in [0, 1].
    """
    if not rates or any(not 0.0 <= a <= 1.0 for a in rates):
        raise ValueError(f"rates must be shares in [0, 1], got {list(rates)}")
    if not min(rates) < target < max(rates):
        raise ValueError(
            f"target all-wrong share {target} must lie strictly between the levels' smallest and largest "
            f"rates ({min(rates):.3f}, {max(rates):.3f})"
        )
    lo, hi = -_BRACKET, _BRACKET
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_share(tilted(rates, mid), rates) < target:
            lo = mid
        else:
            hi = mid
    return tilted(rates, (lo + hi) / 2)


def entropy(weights: Sequence[float]) -> float:
    """Shannon entropy (nats) of a mixture."""
    return -sum(w * math.log(w) for w in weights if w > 0)
