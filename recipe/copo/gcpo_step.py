"""GCPO's advantage for one verl training batch (driver side, like COPO's).

The trainer calls :func:`apply_gcpo` once per step, after the reward, on the whole batch:
it decodes the responses, embeds them (the embedder is built once and cached across
steps), and computes ``copo_core.gcpo`` advantages from the outcome scores and ``uid``.
The (N,) result is either the final advantage (``algorithm.adv_estimator=gcpo``) or
COPO's local term (``algorithm.copo.local_estimator=gcpo``); broadcasting it over
response tokens is the caller's job.

Usage (inside the trainer)::

    adv, metrics = apply_gcpo(batch, config, tokenizer)   # adv: (N,) float32
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from copo_core.gcpo import gcpo_advantages_from_shares, gcpo_metrics, gcpo_shapley
from recipe.copo.config_check import GCPO_DEFAULTS
from recipe.copo.embedders import Embedder, make_embedder

__all__ = [
    "PRECOMPUTED_KEY",
    "apply_gcpo",
    "decode_responses",
    "embed_unique",
    "get_embedder",
    "precomputed_embeddings",
    "response_scores",
]


# Reward extra-info key holding embeddings computed next to the reward; used instead of the embedder.
PRECOMPUTED_KEY = "gcpo_embedding"
_EMBEDDERS: dict[tuple[str, int], Embedder] = {}
_EMBEDDERS_LOCK = threading.Lock()
# Steps seen by this process; varies the Monte Carlo seed when the batch carries no global step.
_CALLS = {"n": 0}


def get_embedder(spec: str, batch_size: int) -> Embedder:
    """The embedder for ``(spec, batch_size)``, built on first use and reused on later steps."""
    key = (str(spec), int(batch_size))
    with _EMBEDDERS_LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = make_embedder(key[0], key[1])
        return _EMBEDDERS[key]


def _response_mask(batch) -> torch.Tensor:
    """(N, L) 0/1 mask of real response tokens: ``response_mask`` or the response part of ``attention_mask``."""
    tensors = batch.batch
    responses = tensors["responses"]
    if "response_mask" in tensors.keys():  # noqa: SIM118 (older TensorDicts reject `key in td`)
        return tensors["response_mask"]
    if "attention_mask" not in tensors.keys():  # noqa: SIM118 (older TensorDicts reject `key in td`)
        raise ValueError(
            "GCPO needs batch['response_mask'] or batch['attention_mask'] to find the response tokens"
        )
    return tensors["attention_mask"][:, -responses.shape[1] :]


def decode_responses(batch, tokenizer) -> list[str]:
    """Response texts of the batch, padding and special tokens removed. Returns N strings."""
    responses = batch.batch["responses"]  # (N, L)
    mask = _response_mask(batch).bool()
    ids = [row[keep].tolist() for row, keep in zip(responses.cpu(), mask.cpu(), strict=True)]
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def response_scores(batch) -> torch.Tensor:
    """(N,) outcome score per response: ``token_level_rewards`` (what verl's GRPO uses) summed over
    response tokens, else ``token_level_scores``."""
    tensors = batch.batch
    for key in ("token_level_rewards", "token_level_scores"):
        if key in tensors.keys():  # noqa: SIM118 (older TensorDicts reject `key in td`)
            mask = _response_mask(batch).to(tensors[key].dtype)
            return (tensors[key] * mask).sum(-1).float()
    raise ValueError(
        "GCPO needs batch['token_level_rewards'] or batch['token_level_scores']; call apply_gcpo after the reward"
    )


def embed_unique(embedder: Embedder, texts: list[str]) -> torch.Tensor:
    """Embed each distinct text once (groups often repeat a response verbatim). Returns (N, d)."""
    position: dict[str, int] = {}
    rows = [position.setdefault(text, len(position)) for text in texts]
    unique = embedder.embed(list(position))  # dict keeps first-seen order
    return unique[torch.tensor(rows, dtype=torch.long)]


def precomputed_embeddings(batch) -> torch.Tensor | None:
    """(N, d) float32 from ``non_tensor_batch['gcpo_embedding']`` when the reward step already
    embedded the responses (one vector per row, e.g. a list of floats in the reward extra info)."""
    values = batch.non_tensor_batch.get(PRECOMPUTED_KEY)
    if values is None:
        return None
    try:
        out = torch.as_tensor(np.stack([np.asarray(v, dtype=np.float32) for v in values]))
    except ValueError as err:
        raise ValueError(
            f"non_tensor_batch[{PRECOMPUTED_KEY!r}] must hold one equal-length vector per response: {err}"
        ) from err
    if out.dim() != 2:
        raise ValueError(f"non_tensor_batch[{PRECOMPUTED_KEY!r}] must be (N, d); got {tuple(out.shape)}")
    return out


def _gcpo_config(config) -> tuple[Mapping[str, Any], bool]:
    algorithm = config.algorithm
    section = algorithm.get("gcpo") if hasattr(algorithm, "get") else getattr(algorithm, "gcpo", None)
    # Unknown keys are rejected at start-up by recipe/copo/config_check.py, not per step.
    merged = {**GCPO_DEFAULTS, **dict(section or {})}
    norm = algorithm.get("norm_adv_by_std_in_grpo", True) if hasattr(algorithm, "get") else True
    return merged, bool(norm)


def _step_seed(base: int, batch, global_step: int | None) -> int:
    _CALLS["n"] += 1
    step = global_step if global_step is not None else batch.meta_info.get("global_steps")
    return int(base) + int(step if step is not None else _CALLS["n"])


def apply_gcpo(
    batch, config, tokenizer, *, global_step: int | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """GCPO advantage of every response in a verl ``DataProto``.

    Args:
        batch: DataProto with ``responses`` (N, L), ``response_mask`` or ``attention_mask``,
            ``token_level_rewards`` or ``token_level_scores`` (N, L), and ``non_tensor_batch['uid']``.
            When ``non_tensor_batch['gcpo_embedding']`` exists (embedded where the reward was
            computed) those vectors are used and nothing is decoded or embedded here.
        config: the trainer config; reads ``algorithm.gcpo.*`` and ``algorithm.norm_adv_by_std_in_grpo``.
        tokenizer: the policy's HF tokenizer (decodes the responses).
        global_step: the Monte Carlo seed is ``algorithm.gcpo.seed + global_step``; when None it is
            read from ``batch.meta_info['global_steps']``, else a per-process step counter is used.

    Returns:
        ``(advantage, metrics)``: (N,) float32 on the scores' device, and floats
        ``coverage_mean``, ``uniqueness_mean``, ``frac_redundant_correct``, ``embed_time_s``,
        ``shapley_time_s``.
    """
    if "uid" not in batch.non_tensor_batch:
        raise ValueError(
            "GCPO needs batch.non_tensor_batch['uid'] (the prompt id verl assigns before rollout)"
        )
    uid = batch.non_tensor_batch["uid"]
    index = uid.tolist() if isinstance(uid, np.ndarray) else list(uid)
    gcpo, norm_adv_by_std = _gcpo_config(config)
    scores = response_scores(batch)

    embeddings = precomputed_embeddings(batch)
    start = time.perf_counter()
    if embeddings is None:
        # Built (model load) on the first step, outside the timed part: embed_time_s is per step.
        embedder = get_embedder(gcpo["embedder"], gcpo["embed_batch_size"])
        start = time.perf_counter()
        embeddings = embed_unique(embedder, decode_responses(batch, tokenizer))  # (N, d)
    embed_time = time.perf_counter() - start

    start = time.perf_counter()
    rewards = scores.detach().cpu()
    shares = gcpo_shapley(
        embeddings,
        rewards,
        index,
        alpha=float(gcpo["alpha"]),
        exact_max_g=int(gcpo["exact_max_g"]),
        num_permutations=int(gcpo["num_permutations"]),
        seed=_step_seed(gcpo["seed"], batch, global_step),
    )
    advantage = gcpo_advantages_from_shares(
        shares, rewards, index, beta=float(gcpo["beta"]), norm_adv_by_std=norm_adv_by_std
    )
    shapley_time = time.perf_counter() - start

    metrics = gcpo_metrics(shares, rewards, index, alpha=float(gcpo["alpha"]))
    metrics.update(embed_time_s=embed_time, shapley_time_s=shapley_time)
    return advantage.to(scores.device), metrics
