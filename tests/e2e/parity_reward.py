"""Test-only reward for the tiny random model: score 1 when the response has an even length.

The tiny model emits random bytes, so a math verifier would score (almost) every response 0
and every group would be zero-variance. Length parity gives about half 1s, so groups have
non-zero advantages and the COPO loss has both terms to blend. ``pred`` (length mod 3) gives
several answer classes per group, so the consistency entropy is non-trivial too.
"""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **kwargs: Any
) -> dict[str, Any]:
    even = len(solution_str) % 2 == 0
    return {"score": 1.0 if even else 0.0, "acc": even, "pred": str(len(solution_str) % 3)}
