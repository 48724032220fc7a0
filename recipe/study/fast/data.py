"""The study's parquet rows as tokenised prompts, and verl's training data order.

A prompt's token ids are the chat template applied to the row's messages with the generation prompt,
as verl's single-turn agent loop renders them. The order is that of verl's sampler (torchdata's
stateful ``RandomSampler``, ``verl.trainer.ppo.utils.create_rl_sampler``) with a generator seeded by
``data.seed``: one ``torch.randperm`` of the dataset per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Prompt:
    """One parquet row.

    Attributes:
        row: the row's position in the file (its identity in per-problem results).
        ids: prompt token ids.
        data_source: the row's ``data_source`` (the task).
        ground_truth: ``reward_model.ground_truth``.
        extra_info: the row's ``extra_info`` (passed to the reward function, as verl does).
    """

    row: int
    ids: tuple[int, ...]
    data_source: str
    ground_truth: str
    extra_info: dict[str, Any]


def load_prompts(parquet: str | Path, tokenizer: Any, max_prompt_length: int) -> list[Prompt]:
    """Every row of ``parquet``, tokenised.

    Raises:
        ValueError: a prompt is longer than ``max_prompt_length`` (verl's ``truncation: error``).
    """
    import pandas as pd

    frame = pd.read_parquet(parquet)
    prompts = []
    for row, record in enumerate(frame.to_dict("records")):
        messages = [dict(m) for m in record["prompt"]]
        ids = tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=True, return_dict=False
        )
        if len(ids) > max_prompt_length:
            raise ValueError(
                f"{parquet} row {row}: prompt of {len(ids)} tokens > data.max_prompt_length={max_prompt_length}"
            )
        extra = record.get("extra_info")
        prompts.append(
            Prompt(
                row=row,
                ids=tuple(int(i) for i in ids),
                data_source=str(record["data_source"]),
                ground_truth=str(record["reward_model"]["ground_truth"]),
                extra_info=dict(extra) if extra is not None else {},
            )
        )
    return prompts


def data_order(size: int, seed: int, shuffle: bool = True) -> Iterator[int]:
    """Endless row indices: epoch after epoch, a ``randperm`` from one generator seeded with ``seed``."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    while True:
        order = torch.randperm(size, generator=generator).tolist() if shuffle else range(size)
        yield from order
