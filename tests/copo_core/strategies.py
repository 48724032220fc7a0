"""Hypothesis strategies for random COPO batches: unequal groups, shuffled order, odd answers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st

# Answers with duplicates, the empty string and None ("unparseable", same class as "").
ANSWER_POOL = ("1", "2", "42", "", None, "x", "1.0")
# Multiples of 1/8: sums and group means are exact in float32 and float64, so the
# float64 loop reference and the float32 code agree on which groups are constant.
GRID_REWARDS = tuple(i / 8 for i in range(-16, 17))


@dataclass
class Batch:
    scores: list[float]
    index: list
    answers: list[str | None]


@st.composite
def batches(draw: st.DrawFn, max_prompts: int = 8, max_group: int = 6) -> Batch:
    """A shuffled batch of P prompts with unequal group sizes and binary or float rewards."""
    n_prompts = draw(st.integers(1, max_prompts))
    sizes = draw(st.lists(st.integers(1, max_group), min_size=n_prompts, max_size=n_prompts))
    binary = draw(st.booleans())
    reward = st.sampled_from((0.0, 1.0)) if binary else st.sampled_from(GRID_REWARDS)
    id_kind = draw(st.sampled_from(("str", "int")))
    ids = [f"uid-{j}" if id_kind == "str" else 1000 - 7 * j for j in range(n_prompts)]
    rows = []
    for j, size in enumerate(sizes):
        for _ in range(size):
            rows.append((ids[j], draw(reward), draw(st.sampled_from(ANSWER_POOL))))
    order = draw(st.permutations(range(len(rows))))
    rows = [rows[i] for i in order]
    return Batch(scores=[r[1] for r in rows], index=[r[0] for r in rows], answers=[r[2] for r in rows])


def index_as(batch_index: list, kind: str):
    """The same prompt ids as a list, a numpy object array (verl's uid) or an int tensor."""
    if kind == "list":
        return batch_index
    if kind == "numpy":
        return np.array(batch_index, dtype=object)
    codes = {v: i * 3 + 1 for i, v in enumerate(dict.fromkeys(batch_index))}
    return torch.tensor([codes[v] for v in batch_index])
