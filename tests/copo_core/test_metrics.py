"""copo_batch_metrics and signal_budget_metrics against group-by-group loop references."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copo_core import BLEND_MODES, compute_copo_advantages, copo_batch_metrics, signal_budget_metrics
from tests.copo_core.reference import ref_batch_metrics
from tests.copo_core.strategies import Batch, batches

KEYS = {
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
    metrics = copo_batch_metrics(adv, batch.index if pass_index else None)
    fields = ("local_adv", "global_adv", "local_weight", "entropy", "prompt_reward")
    ref = ref_batch_metrics({f: getattr(adv, f).double().tolist() for f in fields}, batch.index)
    assert set(metrics) == KEYS
    for key in KEYS:
        assert isinstance(metrics[key], float), key
        assert metrics[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-6), key


def test_hand_computed_batch() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    index = ["a"] * 4 + ["b"] * 2 + ["c"] * 3 + ["d"]
    answers = ["x", "x", "y", "z", "k", "k", "m", "n", "m", "q"]
    adv = compute_copo_advantages(scores, index, answers, blend_mode="local_only")
    m = copo_batch_metrics(adv)
    signal = signal_budget_metrics(adv.blended[:, None], torch.ones(10, 1), scores, index)
    assert signal["frac_groups_all_correct"] == 0.25  # b
    assert signal["frac_groups_all_wrong"] == 0.5  # c, d
    assert signal["frac_groups_zero_variance"] == 0.75  # b, c, d (a group of one counts)
    assert signal["frac_nonzero_adv"] == m["frac_nonzero_adv"]
    assert m["entropy_max"] == pytest.approx(1.5)
    assert m["entropy_min"] == 0.0
    assert m["local_weight_mean"] == 1.0
    assert m["prompt_reward_mean"] == pytest.approx((0.5 + 1.0 + 0.0 + 0.0) / 4)
    # local_only: blended = A^L, non-zero only in group a.
    assert m["frac_nonzero_adv"] == pytest.approx(0.4)


def test_single_prompt_has_zero_std() -> None:
    scores = torch.tensor([1.0, 0.0])
    m = copo_batch_metrics(compute_copo_advantages(scores, [0, 0]))
    assert m["global_adv_std"] == 0.0 and m["global_adv_mean"] == 0.0


def test_bad_arguments() -> None:
    scores = torch.tensor([1.0, 0.0])
    adv = compute_copo_advantages(scores, [0, 0])
    with pytest.raises(ValueError, match="index"):
        copo_batch_metrics(adv, [0])


def _ref_signal_budget(
    adv: list[list[float]], mask: list[list[int]], scores: list[float], index: list
) -> dict:
    """Group-by-group loop reference for signal_budget_metrics."""
    groups: dict = {}
    for i, uid in enumerate(index):
        groups.setdefault(uid, []).append(i)
    live = [
        any(abs(a) > 1e-8 and m for a, m in zip(adv[i], mask[i], strict=True)) for i in range(len(scores))
    ]
    all_correct = [all(scores[i] > 0 for i in rows) for rows in groups.values()]
    all_wrong = [all(scores[i] <= 0 for i in rows) for rows in groups.values()]
    flat = [len({scores[i] for i in rows}) == 1 for rows in groups.values()]
    return {
        "frac_nonzero_adv": sum(live) / len(live),
        "frac_groups_all_correct": sum(all_correct) / len(groups),
        "frac_groups_all_wrong": sum(all_wrong) / len(groups),
        "frac_groups_zero_variance": sum(flat) / len(groups),
        "num_responses": float(len(scores)),
        "num_groups": float(len(groups)),
    }


@settings(max_examples=100, deadline=None)
@given(batch=batches(), length=st.integers(1, 5), data=st.data())
def test_signal_budget_matches_loop_reference(batch: Batch, length: int, data: st.DataObject) -> None:
    n = len(batch.scores)
    # Advantages with exact zeros, tiny values below the tolerance and masked-out non-zeros.
    values = st.sampled_from([0.0, 0.0, 1e-9, -0.5, 1.25])
    adv = [[data.draw(values) for _ in range(length)] for _ in range(n)]
    mask = [[data.draw(st.sampled_from([0, 1])) for _ in range(length)] for _ in range(n)]
    got = signal_budget_metrics(
        torch.tensor(adv), torch.tensor(mask), torch.tensor(batch.scores), batch.index
    )
    ref = _ref_signal_budget(adv, mask, batch.scores, list(batch.index))
    assert set(got) == set(ref)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


def test_signal_budget_grpo_zero_variance_groups_carry_no_signal() -> None:
    # Group a: all correct, group b: all wrong, group c: mixed -> GRPO's advantage is zero on a and b.
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    index = ["a", "a", "b", "b", "c", "c"]
    adv = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.7, -0.7]).unsqueeze(1).expand(6, 3).clone()
    got = signal_budget_metrics(adv, torch.ones(6, 3), scores, index)
    assert got["frac_nonzero_adv"] == pytest.approx(2 / 6)
    assert got["frac_groups_all_correct"] == pytest.approx(1 / 3)
    assert got["frac_groups_all_wrong"] == pytest.approx(1 / 3)
    assert got["frac_groups_zero_variance"] == pytest.approx(2 / 3)


def test_signal_budget_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="advantages"):
        signal_budget_metrics(torch.zeros(3, 2), torch.ones(3, 4), torch.zeros(3), [0, 0, 1])
    with pytest.raises(ValueError, match="index"):
        signal_budget_metrics(torch.zeros(3, 2), torch.ones(3, 2), torch.zeros(3), [0, 0])
