"""Validation: ``val_kwargs.n`` samples of every held-out problem, scored by the project's reward.

Each problem's result is its number of correct samples (0..n); a task's ``mean@n`` is the mean over
its problems of correct / n, verl's ``val-core/<data_source>/acc/mean@n``. The sampling generator
depends on the run's rollout seed and the step only, so every method of a seed validates with the
same random numbers (at step 0, from the same policy, they score identically).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from recipe.cpu_backend.sampling import SamplingParams
from recipe.study.fast.data import Prompt
from recipe.study.fast.rollout import RewardFn, rollout
from recipe.tracking import names

CHUNK = 512  # prompts per sampling call (the KV cache of 2k rows stays small)


def validation_params(settings: Any) -> SamplingParams:
    """The validation sampling of ``actor_rollout_ref.rollout.val_kwargs`` (greedy when do_sample is false)."""
    return SamplingParams(
        temperature=settings.val_temperature if settings.val_do_sample else 0.0,
        top_p=settings.val_top_p,
        top_k=settings.val_top_k,
        max_tokens=settings.max_response_length,
    )


def seed_for(*parts: int) -> int:
    """A 63-bit seed from integers (numpy's SeedSequence: distinct tuples give unrelated streams)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, dtype=np.uint64)[0] >> 1)


def validate(
    model: torch.nn.Module,
    tokenizer: Any,
    reward_fn: RewardFn,
    prompts: Sequence[Prompt],
    settings: Any,
    seed: int,
) -> np.ndarray:
    """(P,) number of correct samples per problem, in ``prompts`` order."""
    model.eval()
    params = validation_params(settings)
    n = settings.val_n if settings.val_do_sample else 1
    generator = torch.Generator().manual_seed(seed)
    correct = np.zeros(len(prompts), dtype=np.int16)
    for start in range(0, len(prompts), CHUNK):
        chunk = prompts[start : start + CHUNK]
        groups = rollout(
            model, tokenizer, reward_fn, chunk, [str(p.row) for p in chunk], n, params, generator
        )
        correct[start : start + len(chunk)] = [sum(g.accs) for g in groups]
    return correct


def validation_metrics(prompts: Sequence[Prompt], correct: np.ndarray, n: int) -> dict[str, float]:
    """verl's ``val-core/<data_source>/acc/mean@n`` per task from per-problem correct counts."""
    by_source: dict[str, list[float]] = defaultdict(list)
    for prompt, c in zip(prompts, correct.tolist(), strict=True):
        by_source[prompt.data_source].append(c / n)
    return {f"{names.VAL_PREFIX}{source}/acc/mean@{n}": float(np.mean(v)) for source, v in by_source.items()}
