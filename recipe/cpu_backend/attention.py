"""``sdpa_gqa``: transformers' SDPA attention that keeps grouped-query heads grouped under a mask.

transformers 5.x's ``sdpa`` copies every key/value head ``num_heads / num_kv_heads`` times
(``repeat_kv``) whenever an attention mask is passed, because CUDA's fused kernels take grouped
heads only without one. On CPU torch's SDPA takes ``enable_gqa=True`` *with* a mask and returns
the same numbers, without the copies. Both CPU paths pass masks all the time: the hf rollout
left-pads prompts of different lengths, and the actor packs each micro-batch into one row
(``use_remove_padding: true``), for which transformers builds a block-diagonal mask. At
SmolLM2-135M's shapes (9 query / 3 key-value heads) one decode step's attention over a 190-token
cache took 3.9 ms per layer with the copies and 0.24 ms without; a padded training micro-batch's
forward + backward 15.7 ms -> 11.7 ms per layer.

A packed row is attended sequence by sequence (:func:`packed_bounds`): the same numbers as the
whole row under its block-diagonal mask, for O(sum L_i^2) work instead of O((sum L_i)^2).

Registered under :data:`ATTN_IMPLEMENTATION` in every process of a CPU job (``install()``); the
hf rollout loads its model with it and ``copo_cpu.yaml`` selects it for the actor
(``actor_rollout_ref.model.override_config.attn_implementation``), so the rollout's log-probs and
the actor's come from the same attention kernel.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import torch

ATTN_IMPLEMENTATION = "sdpa_gqa"


def sdpa_gqa_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature.

    Args:
        query: (B, H, Tq, D); key, value: (B, H_kv, Tk, D) with H a multiple of H_kv.
        attention_mask: bool (B, 1, Tq, Tk) from transformers' ``sdpa_mask`` (True = attend), or
            None for a plain causal attention.

    Returns:
        ((B, Tq, H, D) attention output, None): no attention weights, as transformers' ``sdpa``.
    """
    if kwargs.get("output_attentions", False):
        raise NotImplementedError(
            f"{ATTN_IMPLEMENTATION} returns no attention weights; use attn_implementation=eager"
        )
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    bounds = packed_bounds(kwargs.get("position_ids"), attention_mask)
    if bounds is not None:
        return _packed_attention(query, key, value, attention_mask, bounds, dropout, scaling, causal)
    out = _sdpa(query, key, value, attention_mask, dropout, scaling, causal)
    return out.transpose(1, 2).contiguous(), None


def _sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float,
    scaling: float | None,
    causal: bool,
) -> torch.Tensor:
    """torch SDPA with grouped heads kept grouped; (B, H, Tq, D) out."""
    # the causal flag only without a mask and beyond one query (a decode step attends to all)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    return torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal,
        enable_gqa=key.shape[1] != query.shape[1],
    )


def packed_bounds(position_ids: torch.Tensor | None, attention_mask: torch.Tensor | None) -> list[int] | None:
    """Token offsets where the packed sequences of a ``(1, T)`` row start (and T), or None if not packed.

    verl's ``use_remove_padding`` path packs a micro-batch into one row with no padding; each sequence's
    positions restart at 0. A new sequence starts wherever a position is not its predecessor + 1 (the
    rule of transformers' ``find_packed_sequence_indices``, which then builds a block-diagonal boolean
    mask). The row counts as packed only if that mask is False outside the diagonal blocks, the exact
    condition under which attending within each block on its own gives the same result.
    """
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[0] != 1:
        return None
    if attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.shape[0] != 1:
        return None
    length = position_ids.shape[1]
    if length < 2 or attention_mask.shape[-2:] != (length, length):  # decode steps, caches: not packing
        return None
    pos = position_ids[0]
    starts = ((pos[1:] - pos[:-1]) != 1).nonzero().flatten() + 1
    if starts.numel() == 0:
        return None
    bounds = [0, *starts.tolist(), length]
    for start, end in pairwise(bounds):
        rows = attention_mask[..., start:end, :]
        if rows[..., :start].any() or rows[..., end:].any():
            return None
    return bounds


def _packed_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    bounds: list[int],
    dropout: float,
    scaling: float | None,
    causal: bool,
) -> tuple[torch.Tensor, None]:
    """Attention of each packed sequence on its own, under its diagonal block of the mask:
    O(sum L_i^2) work instead of O((sum L_i)^2)."""
    outs = []
    for start, end in pairwise(bounds):
        mask = attention_mask[:, :, start:end, start:end]
        outs.append(
            _sdpa(
                query[:, :, start:end],
                key[:, :, start:end],
                value[:, :, start:end],
                mask,
                dropout,
                scaling,
                causal,
            )
        )
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None


def register() -> None:
    """Make ``attn_implementation="sdpa_gqa"`` loadable in this process (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, sdpa_gqa_attention_forward)
    # the same boolean masks as ``sdpa`` (transformers builds no mask for unknown names)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
