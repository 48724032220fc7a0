"""Sample G responses per prompt and score them: the rollout and reward of one step.

Sampling is ``recipe.cpu_backend.sampling.DecodeBatch``, the batched decoder of the hf rollout server
that verl's real CPU trainer uses: the log-prob it returns for each token is ``log_softmax(logits / T)``
of the full distribution, which is what the actor recomputes, so it serves as the old log-prob. One
change of schedule, not of distribution: each distinct prompt is prefilled once and its KV cache
copied to its G rows (:class:`ForkedDecode`), where the server prefills every row; at these sizes the
prefill was ~80% of a rollout's time.
Scoring is what verl's reward loop does: decode the response without special tokens and call the
configured reward function (``reward.custom_reward_function``, loaded by verl's
``get_custom_reward_fn``; the study's is ``recipe.reward.compute_score``) as
``fn(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from recipe.cpu_backend.sampling import DecodeBatch, Sample, SampleRow, SamplingParams
from recipe.study.fast.data import Prompt


@dataclass
class Group:
    """One prompt's G responses with their rewards.

    Attributes:
        prompt: the prompt.
        uid: the group's id in its step (verl's ``uid``).
        responses: G token-id lists (ending with eos unless cut at the length cap).
        log_probs: G per-token log-probs of the sampled tokens at the sampling temperature.
        scores: G rewards (``score``). accs: G ``acc`` verdicts. preds: G extracted answers.
    """

    prompt: Prompt
    uid: str
    responses: list[list[int]]
    log_probs: list[list[float]]
    scores: list[float]
    accs: list[bool]
    preds: list[str | None]

    def metric(self, name: str) -> list[float]:
        """Per-response values of a reward field (``acc`` or ``score``), as DAPO's filter reads them."""
        return [float(a) for a in self.accs] if name == "acc" else list(self.scores)

    @property
    def zero_variance(self) -> bool:
        return len(set(self.scores)) == 1


PREFILL_CHUNK = 128  # distinct prompts per prefill forward (large prefills fall out of the CPU caches)


class ForkedDecode(DecodeBatch):
    """A :class:`DecodeBatch` whose rows are ``n`` copies of each prompt, sharing one prefill."""

    @torch.no_grad()
    def add_forked(
        self, prompts: Sequence[Sequence[int]], n: int, max_tokens: int, generator: torch.Generator | None
    ) -> None:
        """Prefill ``prompts`` (in chunks), then give each ``n`` rows; handles are ``(prompt, copy)``.

        Rows are prompt-major and all draw from ``generator`` in row order, as ``sample_batch`` with
        the prompts repeated ``n`` times. Only on an empty batch.
        """
        if self.rows:
            raise RuntimeError("add_forked() starts a batch; this one already has rows")
        for start in range(0, len(prompts), PREFILL_CHUNK):
            chunk = prompts[start : start + PREFILL_CHUNK]
            self.add(
                chunk,
                [max_tokens] * len(chunk),
                [generator] * len(chunk),
                list(range(start, start + len(chunk))),
            )
        index = torch.arange(len(prompts)).repeat_interleave(n)
        for layer in self._layers(self.cache):
            layer.keys = layer.keys[index]
            layer.values = layer.values[index]
        self.attention_mask = self.attention_mask[index]
        self.next_pos = self.next_pos[index]
        assert self.next_logits is not None
        self.next_logits = self.next_logits[index]
        self.rows = [
            SampleRow(limit=max_tokens, generator=generator, handle=(p, j))
            for p in range(len(prompts))
            for j in range(n)
        ]


@torch.no_grad()
def sample_forked(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    n: int,
    params: SamplingParams,
    *,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    generator: torch.Generator | None,
) -> list[list[Sample]]:
    """``n`` samples of each prompt: ``[prompt][copy]``."""
    decode = ForkedDecode(model, params, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)
    decode.add_forked(prompts, n, params.max_tokens, generator)
    results: dict[tuple[int, int], Sample] = {}
    while len(decode):
        results.update(decode.step())
    return [[results[(p, j)] for j in range(n)] for p in range(len(prompts))]


RewardFn = Callable[..., Any]


def score(reward_fn: RewardFn, tokenizer: Any, prompt: Prompt, response: Sequence[int]) -> dict[str, Any]:
    """The reward of one response, called as verl's naive reward loop calls it (a float means score = acc)."""
    text = tokenizer.decode(list(response), skip_special_tokens=True)
    result = reward_fn(
        data_source=prompt.data_source,
        solution_str=text,
        ground_truth=prompt.ground_truth,
        extra_info=dict(prompt.extra_info),
    )
    return result if isinstance(result, dict) else {"score": float(result), "acc": float(result)}


@torch.no_grad()
def rollout(
    model: torch.nn.Module,
    tokenizer: Any,
    reward_fn: RewardFn,
    prompts: Sequence[Prompt],
    uids: Sequence[str],
    n: int,
    params: SamplingParams,
    generator: torch.Generator,
) -> list[Group]:
    """``n`` samples of every prompt, decoded together, then scored.

    Rows are the prompts' ``n`` copies (prompt-major), drawing in row order from ``generator``; the
    same generator state and prompts give the same responses.
    """
    samples = sample_forked(
        model,
        [p.ids for p in prompts],
        n,
        params,
        eos_token_ids=[int(tokenizer.eos_token_id)],
        pad_token_id=int(tokenizer.pad_token_id),
        generator=generator,
    )
    return score_groups(reward_fn, tokenizer, prompts, uids, samples)


def score_groups(
    reward_fn: RewardFn,
    tokenizer: Any,
    prompts: Sequence[Prompt],
    uids: Sequence[str],
    samples: Sequence[Sequence[Sample]],
) -> list[Group]:
    """Each prompt's samples scored into its :class:`Group` (``samples[prompt][copy]``)."""
    groups = []
    for prompt, uid, mine in zip(prompts, uids, samples, strict=True):
        results = [score(reward_fn, tokenizer, prompt, s.token_ids) for s in mine]
        groups.append(
            Group(
                prompt=prompt,
                uid=uid,
                responses=[s.token_ids for s in mine],
                log_probs=[s.log_probs for s in mine],
                scores=[float(r["score"]) for r in results],
                accs=[bool(r["acc"]) for r in results],
                preds=[None if r.get("pred") is None else str(r["pred"]) for r in results],
            )
        )
    return groups
