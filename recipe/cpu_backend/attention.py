"""``sdpa_gqa``: transformers' SDPA attention that keeps grouped-query heads grouped under a mask.

transformers 5.x's ``sdpa`` copies every key/value head ``num_heads / num_kv_heads`` times
(``repeat_kv``) whenever an attention mask is passed, because CUDA's fused kernels take grouped
heads only without one. On CPU torch's SDPA takes ``enable_gqa=True`` *with* a mask and returns
the same numbers, without the copies. Both CPU paths pass masks all the time: the hf rollout
left-pads prompts of different lengths, and the actor pads its micro-batches
(``use_remove_padding: false``). At SmolLM2-135M's shapes (9 query / 3 key-value heads) one
decode step's attention over a 190-token cache took 3.9 ms per layer with the copies and 0.24 ms
without; a training micro-batch's forward + backward 15.7 ms -> 11.7 ms per layer.

Registered under :data:`ATTN_IMPLEMENTATION` in every process of a CPU job (``install()``); the
hf rollout loads its model with it and ``copo_cpu.yaml`` selects it for the actor
(``actor_rollout_ref.model.override_config.attn_implementation``), so the rollout's log-probs and
the actor's come from the same attention kernel.
"""

from __future__ import annotations

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
    # the causal flag only without a mask and beyond one query (a decode step attends to all)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Make ``attn_implementation="sdpa_gqa"`` loadable in this process (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, sdpa_gqa_attention_forward)
    # the same boolean masks as ``sdpa`` (transformers builds no mask for unknown names)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
