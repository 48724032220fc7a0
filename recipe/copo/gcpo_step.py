"""GCPO's advantage for one step, from response texts (driver side, called by ``recipe.copo.step``).

The texts are embedded (the embedder is built once per process and reused across steps; each
distinct text is embedded once) and ``copo_core.gcpo`` turns embeddings, outcome scores and prompt
ids into advantages. The (P,) result is either the final advantage (``algorithm.adv_estimator=gcpo``)
or COPO's local term (``algorithm.copo.local_estimator=gcpo``).

Usage::

    texts = decode_responses(responses, response_mask, tokenizer)       # N strings
    adv, metrics = gcpo_advantage(texts, scores, uids, GcpoConfig(), global_step=3)   # adv: (N,)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from copo_core import GcpoConfig, gcpo_advantages_from_shares, gcpo_metrics, gcpo_shapley
from recipe.copo.embedders import Embedder, make_embedder

__all__ = ["TIMING_KEYS", "decode_responses", "embed_unique", "gcpo_advantage", "get_embedder"]

# Timings gcpo_advantage adds to gcpo_metrics' keys (logged under gcpo/, seconds per step).
EMBED_TIME_S = "embed_time_s"
SHAPLEY_TIME_S = "shapley_time_s"
TIMING_KEYS = (EMBED_TIME_S, SHAPLEY_TIME_S)

_EMBEDDERS: dict[tuple[str, int], Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()


def get_embedder(spec: str, batch_size: int) -> Embedder:
    """The embedder for ``(spec, batch_size)``, built on first use and reused on later steps."""
    key = (str(spec), int(batch_size))
    with _EMBEDDERS_LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = make_embedder(key[0], key[1])
        return _EMBEDDERS[key]


def decode_responses(responses: torch.Tensor, response_mask: torch.Tensor, tokenizer: Any) -> list[str]:
    """Texts of (N, L) response token ids, keeping the tokens where the (N, L) mask is 1 and
    dropping special tokens. Returns N strings."""
    ids = [row[keep].tolist() for row, keep in zip(responses.cpu(), response_mask.bool().cpu(), strict=True)]
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def embed_unique(embedder: Embedder, texts: Sequence[str]) -> torch.Tensor:
    """Embed each distinct text once (groups often repeat a response verbatim). Returns (N, d)."""
    position: dict[str, int] = {}
    rows = [position.setdefault(text, len(position)) for text in texts]
    unique = embedder.embed(list(position))  # dict keeps first-seen order
    return unique[torch.tensor(rows, dtype=torch.long)]


def gcpo_advantage(
    texts: Sequence[str],
    scores: torch.Tensor,
    index: Sequence[Hashable],
    config: GcpoConfig,
    *,
    norm_adv_by_std: bool = True,
    global_step: int = 0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GCPO advantage of N responses.

    Args:
        texts: N decoded responses. scores: (N,) outcome rewards. index: N prompt ids.
        config: ``algorithm.gcpo``; the Monte Carlo seed is ``config.seed + global_step``.
        norm_adv_by_std: verl's ``algorithm.norm_adv_by_std_in_grpo``.

    Returns:
        ``(advantage, metrics)``: (N,) float32 on ``scores``' device, and floats ``coverage_mean``,
        ``uniqueness_mean``, ``frac_redundant_correct``, ``embed_time_s``, ``shapley_time_s``.
    """
    if not (len(texts) == len(index) == scores.shape[0]):
        raise ValueError(
            f"length mismatch: {len(texts)} texts, {scores.shape[0]} scores, {len(index)} prompt ids"
        )
    # Built (model load) on the first step, outside the timed part: embed_time_s is per step.
    embedder = get_embedder(config.embedder, config.embed_batch_size)
    start = time.perf_counter()
    embeddings = embed_unique(embedder, texts)  # (N, d)
    embed_time = time.perf_counter() - start

    start = time.perf_counter()
    rewards = scores.detach().float().cpu()
    shares = gcpo_shapley(
        embeddings,
        rewards,
        index,
        alpha=config.alpha,
        exact_max_g=config.exact_max_g,
        num_permutations=config.num_permutations,
        seed=config.seed + int(global_step),
    )
    advantage = gcpo_advantages_from_shares(
        shares, rewards, index, beta=config.beta, norm_adv_by_std=norm_adv_by_std
    )
    shapley_time = time.perf_counter() - start

    metrics = gcpo_metrics(shares, rewards, index, alpha=config.alpha)
    metrics.update({EMBED_TIME_S: embed_time, SHAPLEY_TIME_S: shapley_time})
    return advantage.to(scores.device), metrics
