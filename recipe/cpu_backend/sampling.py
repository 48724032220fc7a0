"""Batched token-in/token-out sampling with a Hugging Face causal LM (no Ray, no verl).

The log-prob returned for each sampled token is ``log_softmax(logits / temperature)`` of the
*unfiltered* distribution, which is exactly what verl's actor recomputes
(``logits.div_(temperature)`` then ``logprobs_from_logits``), so ``rollout_log_probs`` and
``old_log_probs`` agree up to float error. top-k / top-p only restrict which token is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings (vLLM's meaning: top_k <= 0 and top_p >= 1 disable them)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def group_key(self) -> tuple[float, float, int, bool]:
        """Requests with equal keys can share one batched decode (max_tokens may differ)."""
        return (self.temperature, self.top_p, self.top_k, self.ignore_eos)


@dataclass
class Sample:
    token_ids: list[int]
    log_probs: list[float]
    finished_by_eos: bool


def _filter_logits(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (set to -inf) tokens outside top-k and outside the top-p nucleus. scaled: (B, V)."""
    vocab = scaled.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # keep a token if the mass strictly before it is < top_p (the first token is always kept)
        drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    max_tokens: Sequence[int],
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> list[Sample]:
    """Sample one continuation per prompt, all prompts decoded together with a KV cache.

    Args:
        model: HF causal LM (eval mode) on CPU.
        prompts: B token-id lists (lengths may differ: they are left-padded).
        params: temperature / top_p / top_k / ignore_eos shared by the batch.
        max_tokens: per prompt, the most tokens to generate (>= 1).
        eos_token_ids: tokens that end a response (kept as its last token).
        pad_token_id: id fed for padding and for rows that already stopped.
        generator: torch RNG for sampling: one for the batch, one per prompt (each row then draws
            only from its own, so a row's sample does not depend on its batch-mates), or None for
            the global RNG.

    Returns:
        B samples; ``log_probs[t]`` is the log-prob of ``token_ids[t]`` under the temperature-scaled
        full distribution (temperature 0 reports the unscaled one).
    """
    if len(prompts) != len(max_tokens):
        raise ValueError(f"max_tokens has {len(max_tokens)} entries for {len(prompts)} prompts")
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("prompts: every prompt needs at least one token")
    per_row = generator is not None and not isinstance(generator, torch.Generator)
    if per_row and len(generator) != len(prompts):
        raise ValueError(f"generator: got {len(generator)} generators for {len(prompts)} prompts")
    batch = len(prompts)
    width = max(len(p) for p in prompts)
    input_ids = torch.full((batch, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1
    # left padding: positions count real tokens only, as in an unpadded forward
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

    limits = torch.tensor(list(max_tokens), dtype=torch.long)
    eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long)
    steps = int(limits.max())
    tokens = torch.full((batch, steps), pad_token_id, dtype=torch.long)
    logps = torch.zeros((batch, steps), dtype=torch.float32)
    lengths = torch.zeros(batch, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    by_eos = torch.zeros(batch, dtype=torch.bool)

    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
    past = out.past_key_values
    next_pos = position_ids[:, -1:] + 1
    for step in range(steps):
        logits = out.logits[:, -1, :].float()
        if params.greedy:
            logp_all = torch.log_softmax(logits, dim=-1)
            token = logits.argmax(dim=-1)
        else:
            scaled = logits / params.temperature
            logp_all = torch.log_softmax(scaled, dim=-1)
            probs = torch.softmax(_filter_logits(scaled, params.top_k, params.top_p), dim=-1)
            if per_row:
                token = torch.cat(
                    [
                        torch.multinomial(p[None], 1, generator=g)[0]
                        for p, g in zip(probs, generator, strict=True)
                    ]
                )
            else:
                token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        active = ~done
        token = torch.where(active, token, torch.full_like(token, pad_token_id))
        tokens[:, step] = token
        logps[:, step] = torch.where(active, logp_all.gather(-1, token[:, None]).squeeze(-1), 0.0)
        lengths += active.long()
        hit_eos = active & torch.isin(token, eos) if not params.ignore_eos else torch.zeros_like(active)
        by_eos |= hit_eos
        done |= hit_eos | (lengths >= limits)
        if bool(done.all()):
            break
        attention_mask = torch.cat([attention_mask, torch.ones((batch, 1), dtype=torch.long)], dim=-1)
        out = model(
            input_ids=token[:, None],
            attention_mask=attention_mask,
            position_ids=next_pos,
            past_key_values=past,
            use_cache=True,
        )
        past = out.past_key_values
        next_pos = next_pos + 1

    return [
        Sample(
            token_ids=tokens[row, : lengths[row]].tolist(),
            log_probs=logps[row, : lengths[row]].tolist(),
            finished_by_eos=bool(by_eos[row]),
        )
        for row in range(batch)
    ]
