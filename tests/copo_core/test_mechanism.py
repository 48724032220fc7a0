"""wrong_answer_metrics (the mechanism, issue 37) against a group-by-group loop reference, and the
sign it is there to show: soft_with_zero pushes up the wrong answers of easy prompts, GRPO does not."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copo_core import compute_copo_advantages, group_normalized_advantage
from copo_core.mechanism import MECHANISM_METRIC_KEYS, wrong_answer_metrics
from tests.copo_core.reference import ref_wrong_answer_metrics
from tests.copo_core.strategies import Batch, batches, index_as


@settings(max_examples=150, deadline=None)
@given(
    batch=batches(),
    length=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(("list", "numpy", "tensor")),
)
def test_matches_loop_reference(batch: Batch, length: int, seed: int, kind: str) -> None:
    n = len(batch.scores)
    g = torch.Generator().manual_seed(seed)
    advantages = torch.randn(n, length, generator=g)
    mask = (torch.rand(n, length, generator=g) > 0.3).float()
    scores = torch.tensor(batch.scores)
    got = wrong_answer_metrics(advantages, mask, scores, index_as(batch.index, kind))
    ref = ref_wrong_answer_metrics(advantages.tolist(), mask.tolist(), batch.scores, batch.index)
    assert tuple(got) == MECHANISM_METRIC_KEYS and set(ref) == set(got)
    for key in MECHANISM_METRIC_KEYS:
        assert isinstance(got[key], float), key
        if math.isnan(ref[key]):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-6), key


def test_hand_computed_batch() -> None:
    # a: 3 of 4 right (mixed, bin [0.75, 1)); b: 1 of 2 (bin [0.5, 0.75)); c: all wrong; d: all right
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    index = ["a"] * 4 + ["b"] * 2 + ["c"] * 2 + ["d"]
    adv = torch.tensor([0.5, 0.5, 0.5, 0.3, 1.0, -1.0, -0.2, -0.4, 0.0])[:, None]
    m = wrong_answer_metrics(adv, torch.ones_like(adv), scores, index)
    assert (m["frac_groups_all_wrong"], m["frac_groups_mixed"], m["frac_groups_all_correct"]) == (
        0.25,
        0.5,
        0.25,
    )
    assert m["wrong_adv_all_wrong"] == pytest.approx(-0.3) and m["num_wrong_all_wrong"] == 2
    assert m["wrong_adv_mixed"] == pytest.approx((0.3 - 1.0) / 2) and m["num_wrong_mixed"] == 2
    assert m["wrong_adv_mixed_s075_100"] == pytest.approx(0.3) and m["num_wrong_mixed_s075_100"] == 1
    assert m["wrong_adv_mixed_s050_075"] == pytest.approx(-1.0)
    assert math.isnan(m["wrong_adv_mixed_s000_025"]) and m["num_wrong_mixed_s000_025"] == 0


def test_the_sign_it_shows_soft_with_zero_against_grpo() -> None:
    """Easy prompts (3 of 4 right) beside hard ones: soft_with_zero gives their wrong answers a
    positive advantage (the global term alone), GRPO a negative one; all-wrong groups get 0 from GRPO
    and a negative advantage from COPO (the issue's table, here measured)."""
    easy, hard = [1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]
    scores = torch.tensor(easy * 4 + hard * 4 + [1.0, 0.0, 0.0, 0.0] * 8)
    index = [p for p in range(16) for _ in range(4)]
    answers = ["right" if s > 0 else f"wrong{i}" for i, s in enumerate(scores.tolist())]
    ones = torch.ones(len(index), 1)
    copo = compute_copo_advantages(scores, index, answers, blend_mode="soft_with_zero")
    m_copo = wrong_answer_metrics(copo.blended[:, None], ones, scores, index)
    grpo = group_normalized_advantage(scores, torch.tensor(index), 16)
    m_grpo = wrong_answer_metrics(grpo[:, None], ones, scores, index)
    assert m_copo["wrong_adv_mixed_s075_100"] > 0 > m_grpo["wrong_adv_mixed_s075_100"]
    assert m_copo["wrong_adv_all_wrong"] < 0 and m_grpo["wrong_adv_all_wrong"] == pytest.approx(0.0, abs=1e-6)
    nonpositive = compute_copo_advantages(
        scores, index, answers, blend_mode="soft_with_zero", wrong_answer_global="nonpositive"
    )
    m_variant = wrong_answer_metrics(nonpositive.blended[:, None], ones, scores, index)
    assert m_variant["wrong_adv_mixed_s075_100"] == pytest.approx(0.0, abs=1e-6)  # capped at 0


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="must both be"):
        wrong_answer_metrics(torch.zeros(3, 2), torch.ones(3, 4), torch.zeros(3), [0, 0, 1])
    with pytest.raises(ValueError, match="length"):
        wrong_answer_metrics(torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(3), [0, 0])
