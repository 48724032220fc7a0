"""Batched token-in/token-out sampling with a Hugging Face causal LM (no Ray, no verl).

The log-prob returned for each sampled token is ``log_softmax(logits / temperature)`` of the
*unfiltered* distribution, which is exactly what verl's actor recomputes
(``logits.div_(temperature)`` then ``logprobs_from_logits``), so ``rollout_log_probs`` and
``old_log_probs`` agree up to float error. top-k / top-p only restrict which token is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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


def draw_tokens(probs: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One token per row, row ``i`` drawn from ``probs[i]`` with one uniform number of ``generators[i]``.

    Inverse-CDF sampling, batched: row i takes the first token whose cumulative probability
    exceeds ``u_i`` times the row's total. That is exactly the categorical distribution
    ``torch.multinomial`` samples (zero-probability tokens are never drawn), but one batched
    cumsum replaces B calls of ``multinomial`` over the vocabulary, which cost ~1 ms each with
    49k tokens: 8% of a quickstart rollout. Each row still reads only its own generator, so a
    row's draw does not depend on its batch-mates.

    Args:
        probs: (B, V) non-negative, each row with a positive sum (need not be normalised).
        generators: B torch RNGs (None: the global RNG); the same one may serve several rows,
            which then draw from it in row order.

    Returns:
        (B,) int64 token ids.
    """
    if probs.ndim != 2 or probs.shape[0] != len(generators):
        raise ValueError(f"draw_tokens: probs {tuple(probs.shape)} for {len(generators)} generators")
    # float32 uniforms in [0, 1 - 2**-24]: u * total stays below the total in float64 (53 bits)
    # drawn on CPU from each row's CPU generator (the same numbers on any device), then moved
    uniforms = torch.cat([torch.rand(1, generator=g) for g in generators]).double().to(probs.device)
    cdf = probs.double().cumsum(dim=-1)
    target = (uniforms * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


def next_tokens(
    logits: torch.Tensor, params: SamplingParams, generators: Sequence[torch.Generator | None]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step's draw: ``(token (B,), its log-prob (B,))`` from next-token ``logits`` (B, V).

    Greedy (argmax, log-prob of the unscaled distribution) at temperature 0; else row ``i`` draws with
    :func:`draw_tokens` from ``generators[i]`` after top-k/top-p, and its log-prob is that of the
    temperature-scaled full distribution.
    """
    if params.greedy:
        logp_all = torch.log_softmax(logits, dim=-1)
        token = logits.argmax(dim=-1)
    else:
        scaled = logits / params.temperature
        logp_all = torch.log_softmax(scaled, dim=-1)
        probs = torch.softmax(_filter_logits(scaled, params.top_k, params.top_p), dim=-1)
        token = draw_tokens(probs, generators)
    return token, logp_all.gather(-1, token[:, None]).squeeze(-1)


@dataclass
class SampleRow:
    """One response being decoded: where it stands and who is waiting for it."""

    limit: int
    generator: torch.Generator | None
    handle: Any
    tokens: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)


def takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs do): a prefill
    then computes lm_head for the last position only, not for every prompt token (on SmolLM2 the
    49k-vocabulary head is a fifth of a token's FLOPs, and the (B, L, V) logits hundreds of MB); the
    CPU training engine for the response positions only (engine.py)."""
    import inspect

    return "logits_to_keep" in inspect.signature(model.forward).parameters


def _left_pad_time(t: torch.Tensor, width: int) -> torch.Tensor:
    """Pad dim -2 (time) of a KV tensor (B, H, T, D) on the left with zeros up to ``width``."""
    missing = width - t.shape[-2]
    return t if missing <= 0 else torch.nn.functional.pad(t, (0, 0, missing, 0))


class DecodeBatch:
    """Rows decoded together with one KV cache; rows join and leave between decode steps.

    This is continuous batching for a CPU: a request that arrives while others are decoding is
    prefilled on its own and merged into the running batch at the next step (the two caches are
    left-padded to a common length), and a row leaves the batch as soon as it stops, so finished
    rows cost nothing and stragglers never wait for a whole batch. Rows are left-aligned
    (``attention_mask`` zeros on the left, positions count real tokens only); the columns no row
    needs any more are dropped after rows leave.

    All rows share one set of sampling params (``params``); each row draws from its own RNG, so a
    row's sample does not depend on its batch-mates (up to float error of the padded kernels).
    Every tensor lives on the model's device (CPU or a GPU).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        params: SamplingParams,
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
    ) -> None:
        self.model = model
        self.params = params
        self.device = next(model.parameters()).device
        self.pad_token_id = int(pad_token_id)
        self.eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long, device=self.device)
        self.rows: list[SampleRow] = []
        self.cache: Any = None  # transformers DynamicCache
        self.attention_mask = self._long((0, 0))
        self.next_pos = self._long((0, 1))
        self.next_logits: torch.Tensor | None = None  # (B, V): logits of each row's next token
        self.forward_calls = 0

    def __len__(self) -> int:
        return len(self.rows)

    def _long(self, shape: tuple[int, int], fill: int = 0) -> torch.Tensor:
        return torch.full(shape, fill, dtype=torch.long, device=self.device)

    @torch.no_grad()
    def add(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: Sequence[int],
        generators: Sequence[torch.Generator | None],
        handles: Sequence[Any],
    ) -> None:
        """Prefill ``prompts`` (left-padded among themselves) and merge them into the batch."""
        if not (len(prompts) == len(max_tokens) == len(generators) == len(handles)):
            raise ValueError("add(): prompts, max_tokens, generators and handles differ in length")
        if not prompts:
            return
        if any(len(p) == 0 for p in prompts):
            raise ValueError("prompts: every prompt needs at least one token")
        if any(int(m) < 1 for m in max_tokens):
            raise ValueError(f"max_tokens must be >= 1, got {list(max_tokens)}")
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((batch, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        extra = {"logits_to_keep": 1} if takes_logits_to_keep(self.model) else {}
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=True, **extra
        )
        self.forward_calls += 1
        logits = out.logits[:, -1, :].float()
        new_rows = [
            SampleRow(limit=int(m), generator=g, handle=h)
            for m, g, h in zip(max_tokens, generators, handles, strict=True)
        ]
        if not self.rows:
            self.cache, self.attention_mask = out.past_key_values, mask
            self.next_pos, self.next_logits, self.rows = position_ids[:, -1:] + 1, logits, new_rows
            return
        self._merge(out.past_key_values, mask)
        self.next_pos = torch.cat([self.next_pos, position_ids[:, -1:] + 1])
        self.next_logits = torch.cat([self.next_logits, logits])
        self.rows.extend(new_rows)

    def _merge(self, cache: Any, mask: torch.Tensor) -> None:
        width = max(self.attention_mask.shape[1], mask.shape[1])
        for mine, theirs in zip(self._layers(self.cache), self._layers(cache), strict=True):
            mine.keys = torch.cat([_left_pad_time(mine.keys, width), _left_pad_time(theirs.keys, width)])
            mine.values = torch.cat(
                [_left_pad_time(mine.values, width), _left_pad_time(theirs.values, width)]
            )
        pad = torch.nn.functional.pad
        self.attention_mask = torch.cat(
            [
                pad(self.attention_mask, (width - self.attention_mask.shape[1], 0)),
                pad(mask, (width - mask.shape[1], 0)),
            ]
        )

    @staticmethod
    def _layers(cache: Any) -> list[Any]:
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        if layers is None or any(type(layer) is not DynamicLayer for layer in layers):
            raise NotImplementedError(
                "the hf rollout merges KV caches of plain DynamicCache layers only (no sliding-window or "
                f"quantized caches); got {type(cache).__name__}"
            )
        return list(layers)

    def _keep(self, keep: torch.Tensor) -> None:
        """Keep rows ``keep`` (bool (B,)), then drop the cache columns no remaining row attends to."""
        index = keep.nonzero().squeeze(-1)
        self.rows = [self.rows[i] for i in index.tolist()]
        if not self.rows:
            self.cache, self.next_logits = None, None
            self.attention_mask = self._long((0, 0))
            self.next_pos = self._long((0, 1))
            return
        mask = self.attention_mask[index]
        first = int((mask.sum(0) > 0).long().argmax())  # leading columns that are padding for every row
        self.attention_mask = mask[:, first:]
        for layer in self._layers(self.cache):
            layer.keys = layer.keys[index, :, first:]
            layer.values = layer.values[index, :, first:]
        self.next_pos = self.next_pos[index]
        self.next_logits = self.next_logits[index]

    @torch.no_grad()
    def step(self) -> list[tuple[Any, Sample]]:
        """Sample one token for every row; return the rows that finished, decode the others one step."""
        if not self.rows:
            return []
        params = self.params
        assert self.next_logits is not None
        token, logp = next_tokens(self.next_logits, params, [row.generator for row in self.rows])
        hit_eos = (
            torch.isin(token, self.eos)
            if not params.ignore_eos
            else torch.zeros_like(token, dtype=torch.bool)
        )
        finished: list[tuple[Any, Sample]] = []
        keep = torch.ones(len(self.rows), dtype=torch.bool, device=self.device)
        for i, (row, t, lp, eos) in enumerate(
            zip(self.rows, token.tolist(), logp.tolist(), hit_eos.tolist(), strict=True)
        ):
            row.tokens.append(t)
            row.logps.append(lp)
            if eos or len(row.tokens) >= row.limit:
                finished.append((row.handle, Sample(row.tokens, row.logps, finished_by_eos=bool(eos))))
                keep[i] = False
        if finished:
            self._keep(keep)
            token = token[keep]
        if self.rows:
            self.attention_mask = torch.cat(
                [self.attention_mask, self._long((len(self.rows), 1), fill=1)], dim=-1
            )
            out = self.model(
                input_ids=token[:, None],
                attention_mask=self.attention_mask,
                position_ids=self.next_pos,
                past_key_values=self.cache,
                use_cache=True,
            )
            self.forward_calls += 1
            self.cache = out.past_key_values
            self.next_logits = out.logits[:, -1, :].float()
            self.next_pos = self.next_pos + 1
        return finished


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
    """Sample one continuation per prompt, all prompts decoded together (a :class:`DecodeBatch`).

    Args:
        model: HF causal LM (eval mode) on any device.
        prompts: B token-id lists (lengths may differ: they are left-padded).
        params: temperature / top_p / top_k / ignore_eos shared by the batch.
        max_tokens: per prompt, the most tokens to generate (>= 1).
        eos_token_ids: tokens that end a response (kept as its last token).
        pad_token_id: id fed for padding.
        generator: torch RNG for sampling: one per prompt (each row then draws only from its own, so
            a row's sample does not depend on its batch-mates), one shared by the batch (rows draw
            from it in row order), or None for the global RNG.

    Returns:
        B samples; ``log_probs[t]`` is the log-prob of ``token_ids[t]`` under the temperature-scaled
        full distribution (temperature 0 reports the unscaled one).
    """
    if len(prompts) != len(max_tokens):
        raise ValueError(f"max_tokens has {len(max_tokens)} entries for {len(prompts)} prompts")
    if not prompts:
        return []
    per_row = generator is not None and not isinstance(generator, torch.Generator)
    if per_row and len(generator) != len(prompts):
        raise ValueError(f"generator: got {len(generator)} generators for {len(prompts)} prompts")
    generators = list(generator) if per_row else [generator] * len(prompts)
    decode = DecodeBatch(model, params, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)
    decode.add(prompts, max_tokens, generators, list(range(len(prompts))))
    results: dict[int, Sample] = {}
    while len(decode):
        results.update(decode.step())
    return [results[row] for row in range(len(prompts))]
