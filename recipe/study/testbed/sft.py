"""Supervised fine-tuning of the testbed policy on the task's SFT stream (plain PyTorch, one thread).

Each example is the chat-rendered prompt (exactly the token ids verl's agent loop builds) followed
by the target reply ``\\boxed{a + b}`` and the end-of-turn token; the loss is the mean cross-entropy
of the reply tokens only. One thread, so the weights are the same on every run of the same spec
(thread count changes the order of float reductions).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from recipe.study.testbed.task import Problem

IGNORE_INDEX = -100


@dataclass(frozen=True)
class SFTSpec:
    """How much and how the policy is fine-tuned; part of the cache key.

    Attributes:
        steps: optimizer steps; with the task mix, this sets the step-0 accuracy of the RL study.
        batch_size: examples per step.
        lr: AdamW peak learning rate (linear warm-up, then cosine decay to ``min_lr_ratio * lr``).
        warmup_steps: linear warm-up length.
        min_lr_ratio: final learning rate over the peak. The decay settles the policy: at a constant
            3e-3 the accuracy of a level swung by tens of points between nearby steps.
        weight_decay, betas, grad_clip: AdamW and gradient-norm clipping.
        seed: torch seed of the initial weights.
    """

    steps: int = 850
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError(f"SFTSpec: steps, batch_size and lr must be positive, got {self}")


def prompt_ids(tokenizer: Any, problem: Problem) -> list[int]:
    """The prompt token ids as verl renders them (chat template with the generation prompt)."""
    ids = tokenizer.apply_chat_template(
        problem.messages(), tokenize=True, add_generation_prompt=True, return_dict=False
    )
    return [int(i) for i in ids]


def reply_ids(tokenizer: Any, problem: Problem) -> list[int]:
    """The target reply's token ids, ending with the end-of-turn (eos) token."""
    return [*tokenizer.encode(problem.target, add_special_tokens=False), int(tokenizer.eos_token_id)]


def collate(tokenizer: Any, problems: list[Problem]) -> dict[str, Any]:
    """Right-padded (B, T) ``input_ids``, ``attention_mask`` and ``labels`` (prompt and padding ignored)."""
    import torch

    pairs = [(prompt_ids(tokenizer, p), reply_ids(tokenizer, p)) for p in problems]
    width = max(len(p) + len(r) for p, r in pairs)
    ids = torch.full((len(pairs), width), int(tokenizer.pad_token_id), dtype=torch.long)
    labels = torch.full_like(ids, IGNORE_INDEX)
    mask = torch.zeros_like(ids)
    for row, (prompt, reply) in enumerate(pairs):
        seq = prompt + reply
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, len(prompt) : len(seq)] = torch.tensor(reply)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def learning_rate(spec: SFTSpec, step: int) -> float:
    """The learning rate of (1-based) ``step``: linear warm-up, then cosine from ``lr`` to ``min_lr_ratio * lr``."""
    if step <= spec.warmup_steps:
        return spec.lr * step / max(1, spec.warmup_steps)
    progress = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
    floor = spec.lr * spec.min_lr_ratio
    return floor + (spec.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def _log(message: str) -> None:
    print(f"[testbed] {message}", file=sys.stderr, flush=True)


def train_sft(
    model: Any,
    tokenizer: Any,
    stream: Iterator[Problem],
    spec: SFTSpec,
    log_every: int = 100,
    log: Callable[[str], None] = _log,
) -> list[dict[str, float]]:
    """Fine-tune ``model`` in place for ``spec.steps`` steps on ``stream``; returns the loss log.

    Returns:
        one ``{"step", "loss", "seconds"}`` per ``log_every`` steps (and the last step); ``loss`` is
        the mean of the steps since the previous entry.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=spec.lr, betas=spec.betas, weight_decay=spec.weight_decay
        )
        model.train()
        history: list[dict[str, float]] = []
        started = time.monotonic()
        window: list[float] = []
        for step in range(1, spec.steps + 1):
            lr = learning_rate(spec, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = collate(tokenizer, [next(stream) for _ in range(spec.batch_size)])
            loss = model(**batch).loss
            if not math.isfinite(loss.item()):
                raise FloatingPointError(f"SFT loss is {loss.item()} at step {step}; lower SFTSpec.lr")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            window.append(loss.item())
            if step % log_every == 0 or step == spec.steps:
                elapsed = time.monotonic() - started
                history.append(
                    {"step": step, "loss": sum(window) / len(window), "seconds": round(elapsed, 1)}
                )
                eta = elapsed / step * (spec.steps - step)
                log(
                    f"SFT step {step}/{spec.steps}  loss {history[-1]['loss']:.4f}  {elapsed:.0f} s  ETA {eta:.0f} s"
                )
                window = []
        model.eval()
        return history
    finally:
        torch.set_num_threads(threads)
