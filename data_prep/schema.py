"""verl's RL parquet schema, shared by every converter.

One row::

    {
      "data_source": str,                         # e.g. "math_dapo", "HuggingFaceH4/MATH-500", "reasoning_gym/chain_sum"
      "prompt": [{"role": "user", "content": problem + "\\n" + INSTRUCTION}],
      "ability": "math",
      "reward_model": {"style": "rule", "ground_truth": str},
      "extra_info": {"split": str, "index": int, "original_id": str},
    }

``index`` is the row's position in the written file; ``original_id`` identifies the source record
(its id column when the source has one, else ``"<source row number>"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["INSTRUCTION", "ABILITY", "RowError", "make_row", "coerce_answer", "coerce_problem"]

# The one fixed instruction appended to every problem (the reward extracts the last \boxed{}).
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
ABILITY = "math"


@dataclass(frozen=True)
class RowError:
    """A malformed source row: ``row`` is its 0-based position in the source, ``reason`` says what is wrong."""

    row: int
    reason: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.reason}"


def coerce_problem(value: Any) -> str | None:
    """The problem text stripped, or None when missing/empty/not a string."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


def coerce_answer(value: Any, *, allow_numeric: bool) -> tuple[str | None, str | None]:
    """``(answer, None)`` or ``(None, reason)``.

    Strings are stripped. Finite ints/floats are accepted only where a dataset stores numeric answers
    (``allow_numeric``: AIME, AMC); integral floats become integer strings (``27.0`` -> ``"27"``).
    """
    if value is None:
        return None, "missing answer"
    if isinstance(value, str):
        value = value.strip()
        return (value, None) if value else (None, "missing answer (empty string)")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"non-string answer of type {type(value).__name__}"
    if not allow_numeric:
        return None, f"non-string answer of type {type(value).__name__} ({value!r})"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, f"non-finite numeric answer {value!r}"
        if value.is_integer():
            return str(int(value)), None
    return str(value), None


def make_row(
    data_source: str, problem: str, answer: str, *, split: str, index: int, original_id: str
) -> dict:
    """One verl RL row (see module docstring)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": problem + "\n" + INSTRUCTION}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": int(index), "original_id": str(original_id)},
    }
