"""Scoring with the project's reward function (``recipe.reward.compute_score_batch``).

The reward returns ``{"score", "acc", "pred", ...}`` per response. ``acc`` (correctness) feeds
mean@k / maj@k / pass@k, as verl's validation uses ``acc`` when present; ``pred`` (the
normalised final answer) feeds the majority vote.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .datasets import Problem

DEFAULT_REWARD = "recipe.reward:compute_score_batch"
BatchRewardFn = Callable[..., list[dict[str, Any]]]


@dataclass(frozen=True)
class Score:
    """One response's verdict: reward ``score``, 0/1 ``correct`` and the extracted answer ``pred``."""

    score: float
    correct: float
    pred: str


def load_reward_fn(spec: str = DEFAULT_REWARD) -> BatchRewardFn:
    """Import ``module:function``, a batch reward with ``compute_score_batch``'s signature."""
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise ValueError(f"--reward {spec!r}: expected module:function, e.g. {DEFAULT_REWARD}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"--reward {spec!r}: cannot import it ({err}); run from the repository root"
        ) from err


def _to_score(result: dict[str, Any] | float) -> Score:
    if not isinstance(result, dict):  # verl also accepts plain float rewards
        value = float(result)
        return Score(score=value, correct=float(value > 0), pred="")
    score = float(result.get("score", 0.0))
    correct = float(bool(result["acc"])) if "acc" in result else float(score > 0)
    pred = result.get("pred")
    return Score(score=score, correct=correct, pred="" if pred is None else str(pred))


def score_responses(
    reward_fn: BatchRewardFn, problems: Sequence[Problem], responses: Sequence[Sequence[str]]
) -> list[list[Score]]:
    """Score (P, k) responses of P problems in one batch call.

    Returns:
        (P, k) scores in the same order.
    """
    flat_problems = [p for p, samples in zip(problems, responses, strict=True) for _ in samples]
    flat_texts = [text for samples in responses for text in samples]
    results = reward_fn(
        [p.data_source for p in flat_problems],
        flat_texts,
        [p.ground_truth for p in flat_problems],
        [p.extra_info for p in flat_problems],
    )
    if len(results) != len(flat_texts):
        raise RuntimeError(
            f"the reward function returned {len(results)} results for {len(flat_texts)} responses"
        )
    scores = [_to_score(r) for r in results]
    out, pos = [], 0
    for samples in responses:
        out.append(scores[pos : pos + len(samples)])
        pos += len(samples)
    return out
