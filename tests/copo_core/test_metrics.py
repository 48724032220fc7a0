"""copo_batch_metrics against the group-by-group loop reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copo_core import BLEND_MODES, compute_copo_advantages, copo_batch_metrics
from tests.copo_core.reference import ref_batch_metrics
from tests.copo_core.strategies import Batch, batches

KEYS = {
    "frac_groups_all_correct",
    "frac_groups_all_wrong",
    "frac_groups_zero_variance",
    "entropy_mean",
    "entropy_min",
    "entropy_max",
    "local_weight_mean",
    "global_adv_mean",
    "global_adv_std",
    "frac_nonzero_adv",
    "prompt_reward_mean",
}


@settings(max_examples=150, deadline=None)
@given(batch=batches(), blend_mode=st.sampled_from(BLEND_MODES), pass_index=st.booleans())
def test_matches_loop_reference(batch: Batch, blend_mode: str, pass_index: bool) -> None:
    scores = torch.tensor(batch.scores)
    adv = compute_copo_advantages(scores, batch.index, batch.answers, blend_mode=blend_mode)
    metrics = copo_batch_metrics(adv, scores, batch.index if pass_index else None)
    fields = ("local_adv", "global_adv", "local_weight", "entropy", "prompt_reward")
    ref = ref_batch_metrics({f: getattr(adv, f).double().tolist() for f in fields}, batch.scores, batch.index)
    assert set(metrics) == KEYS
    for key in KEYS:
        assert isinstance(metrics[key], float), key
        assert metrics[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-6), key


def test_hand_computed_batch() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    index = ["a"] * 4 + ["b"] * 2 + ["c"] * 3 + ["d"]
    answers = ["x", "x", "y", "z", "k", "k", "m", "n", "m", "q"]
    adv = compute_copo_advantages(scores, index, answers, blend_mode="local_only")
    m = copo_batch_metrics(adv, scores)
    assert m["frac_groups_all_correct"] == 0.25  # b
    assert m["frac_groups_all_wrong"] == 0.5  # c, d
    assert m["frac_groups_zero_variance"] == 0.75  # b, c, d (a group of one counts)
    assert m["entropy_max"] == pytest.approx(1.5)
    assert m["entropy_min"] == 0.0
    assert m["local_weight_mean"] == 1.0
    assert m["prompt_reward_mean"] == pytest.approx((0.5 + 1.0 + 0.0 + 0.0) / 4)
    # local_only: blended = A^L, non-zero only in group a.
    assert m["frac_nonzero_adv"] == pytest.approx(0.4)


def test_single_prompt_has_zero_std() -> None:
    scores = torch.tensor([1.0, 0.0])
    m = copo_batch_metrics(compute_copo_advantages(scores, [0, 0]), scores)
    assert m["global_adv_std"] == 0.0 and m["global_adv_mean"] == 0.0


def test_bad_arguments() -> None:
    scores = torch.tensor([1.0, 0.0])
    adv = compute_copo_advantages(scores, [0, 0])
    with pytest.raises(ValueError, match="scores"):
        copo_batch_metrics(adv, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="index"):
        copo_batch_metrics(adv, scores, [0])
