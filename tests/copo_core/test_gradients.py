"""Which groups carry a gradient under each blend mode, with a tiny torch policy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from copo_core import compute_copo_advantages, copo_policy_loss

VOCAB, LENGTH = 7, 5


class TinyPolicy(nn.Module):
    """Token log-probs of fixed responses: embedding -> linear -> log_softmax -> gather."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, L) token ids -> (N, L) log-probs of the next token (previous token as context)."""
        context = torch.roll(tokens, shifts=1, dims=1)
        logp = torch.log_softmax(self.head(self.embed(context)), dim=-1)
        return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


# Prompt "wrong": every response wrong (spread-out answers); "right": all correct, one
# answer; "mixed": half right. Prompt rewards 0, 1, 0.5 differ across the batch.
SCORES = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
INDEX = ["wrong"] * 4 + ["right"] * 4 + ["mixed"] * 4
ANSWERS = ["3", "4", "3", ""] + ["7"] * 4 + ["7", "2", "7", "9"]
ROWS = {"wrong": slice(0, 4), "right": slice(4, 8), "mixed": slice(8, 12)}


def _group_grad_norm(blend_mode: str, group: str, scores: torch.Tensor = SCORES) -> float:
    """Norm of the parameter gradient when only ``group``'s tokens enter the loss."""
    policy = TinyPolicy()
    tokens = torch.randint(0, VOCAB, (len(scores), LENGTH), generator=torch.Generator().manual_seed(1))
    adv = compute_copo_advantages(scores, INDEX, ANSWERS, blend_mode=blend_mode)
    mask = torch.zeros(len(scores), LENGTH)
    mask[ROWS[group]] = 1.0
    log_prob = policy(tokens)
    loss, _ = copo_policy_loss(
        log_prob.detach(), log_prob, adv.local_adv, adv.global_adv, adv.local_weight, mask
    )
    loss.backward()
    return torch.sqrt(sum((p.grad**2).sum() for p in policy.parameters())).item()


@pytest.mark.parametrize("group", ["wrong", "right"])
def test_uniform_group_has_no_gradient_under_local_only(group: str) -> None:
    assert _group_grad_norm("local_only", group) == 0.0


@pytest.mark.parametrize("group", ["wrong", "right"])
@pytest.mark.parametrize("blend_mode", ["soft", "soft_with_zero", "global_only"])
def test_uniform_group_learns_from_global_term(group: str, blend_mode: str) -> None:
    assert _group_grad_norm(blend_mode, group) > 1e-4


def test_mixed_group_learns_under_local_only() -> None:
    assert _group_grad_norm("local_only", "mixed") > 1e-4


def test_no_global_gradient_when_prompt_rewards_are_equal() -> None:
    # Every prompt at mean reward 0.5: A^G = 0 exactly, so global_only has nothing to learn.
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0] * 3)
    for group in ROWS:
        assert _group_grad_norm("global_only", group, scores) == 0.0


def test_gradient_direction_follows_global_advantage() -> None:
    """On-policy, d loss / d logp_t = -(w A^L + (1 - w) A^G) / (tokens of the row) / rows (seq-mean-token-mean)."""
    adv = compute_copo_advantages(SCORES, INDEX, ANSWERS, blend_mode="soft_with_zero")
    log_prob = torch.randn(len(SCORES), LENGTH, requires_grad=True)
    mask = torch.ones(len(SCORES), LENGTH)
    loss, _ = copo_policy_loss(
        log_prob.detach(), log_prob, adv.local_adv, adv.global_adv, adv.local_weight, mask
    )
    loss.backward()
    expected = -(adv.blended / LENGTH / len(SCORES)).unsqueeze(-1).expand(-1, LENGTH)
    torch.testing.assert_close(log_prob.grad, expected, rtol=1e-6, atol=1e-8)
