"""``token_log_probs`` against verl's CPU path (temperature division + ``logprobs_from_logits``)."""

from __future__ import annotations

import pytest
import torch
from verl.utils.torch_functional import logprobs_from_logits

from recipe.cpu_backend.logprob import token_log_probs


def _verl(logits: torch.Tensor, labels: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """What verl's packed branch computes: logits / T (clamped), then its log-prob fallback."""
    return logprobs_from_logits(logits / temperature.clamp(min=1e-8).unsqueeze(-1), labels)


@pytest.mark.parametrize("temperature", [1.0, 0.7, "per-row"])
def test_values_and_gradients_match_verls(temperature) -> None:
    gen = torch.Generator().manual_seed(0)
    n, vocab = 37, 1003
    logits = (torch.randn(n, vocab, generator=gen) * 4).requires_grad_()
    labels = torch.randint(0, vocab, (n,), generator=gen)
    temps = torch.rand(n, generator=gen) + 0.3 if temperature == "per-row" else torch.full((n,), temperature)
    upstream = torch.randn(n, generator=gen)  # a loss that weighs tokens differently

    ours = token_log_probs(logits, labels, temps)
    (grad_ours,) = torch.autograd.grad((ours * upstream).sum(), logits)
    theirs = _verl(logits, labels, temps)
    (grad_theirs,) = torch.autograd.grad((theirs * upstream).sum(), logits)

    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(grad_ours, grad_theirs, rtol=1e-5, atol=1e-7)
    assert grad_ours.abs().max() > 1e-3  # a gradient that could have been wrong


def test_gradcheck_in_double() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 6, 3, 3])
    temps = torch.tensor([1.0, 0.5, 2.0, 0.7], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: token_log_probs(x, labels, temps), (logits,))


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="expected logits"):
        token_log_probs(torch.zeros(2, 3, 5), torch.zeros(2, dtype=torch.long), torch.ones(2))
