"""compute_copo_advantages against the loop reference, hand-computed cases, edge cases, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from copo_core import BLEND_MODES, ENTROPY_SOURCES, CopoAdvantages, compute_copo_advantages, group_inverse
from tests.copo_core.reference import ref_copo_advantages
from tests.copo_core.strategies import Batch, batches, index_as

FIELDS = ("local_adv", "global_adv", "local_weight", "entropy", "prompt_reward")


def _assert_matches_reference(out: CopoAdvantages, ref: dict[str, list[float]]) -> None:
    for name in FIELDS:
        got = getattr(out, name)
        assert got.dtype == torch.float32 and got.shape == (len(ref[name]),), name
        torch.testing.assert_close(
            got.double(), torch.tensor(ref[name], dtype=torch.float64), rtol=1e-5, atol=1e-5, msg=name
        )


def _prompt_reward_spread(ref: dict[str, list[float]]) -> float:
    return max(ref["prompt_reward"]) - min(ref["prompt_reward"])


@settings(max_examples=200, deadline=None)
@given(
    batch=batches(),
    blend_mode=st.sampled_from(BLEND_MODES),
    entropy_source=st.sampled_from(ENTROPY_SOURCES),
    entropy_penalty=st.booleans(),
    norm=st.booleans(),
    with_answers=st.booleans(),
    k=st.sampled_from((0.0, 1.0, 5.0, 20.0)),
    b=st.sampled_from((0.0, 1.0, 1.5)),
    index_kind=st.sampled_from(("list", "numpy", "tensor")),
)
def test_matches_loop_reference(
    batch: Batch,
    blend_mode: str,
    entropy_source: str,
    entropy_penalty: bool,
    norm: bool,
    with_answers: bool,
    k: float,
    b: float,
    index_kind: str,
) -> None:
    answers = batch.answers if with_answers else None
    kwargs = dict(
        k=k,
        b=b,
        blend_mode=blend_mode,
        entropy_source=entropy_source,
        entropy_penalty=entropy_penalty,
        norm_adv_by_std=norm,
    )
    ref = ref_copo_advantages(batch.scores, batch.index, answers, **kwargs)
    # With the entropy factor, prompt rewards that are equal in exact arithmetic can differ by
    # one rounding step in float32 and float64 differently; such a batch has no global signal
    # and both codes would return rounding noise / eps. The exact-zero case is tested below.
    spread = _prompt_reward_spread(ref)
    assume(spread > 1e-4 or (spread == 0.0 and not entropy_penalty))
    out = compute_copo_advantages(
        torch.tensor(batch.scores), index_as(batch.index, index_kind), answers, **kwargs
    )
    _assert_matches_reference(out, ref)
    inverse, n_groups = group_inverse(batch.index)
    assert out.num_groups == n_groups == len(set(batch.index))
    # Same prompt <-> same group id.
    for i in range(len(batch.index)):
        for j in range(len(batch.index)):
            assert (batch.index[i] == batch.index[j]) == bool(out.group_index[i] == out.group_index[j])
    assert torch.equal(
        out.blended, out.local_weight * out.local_adv + (1 - out.local_weight) * out.global_adv
    )


@settings(max_examples=60, deadline=None)
@given(batch=batches(), seed=st.integers(0, 2**31 - 1), blend_mode=st.sampled_from(BLEND_MODES))
def test_permuting_responses_permutes_outputs(batch: Batch, seed: int, blend_mode: str) -> None:
    perm = torch.randperm(len(batch.scores), generator=torch.Generator().manual_seed(seed))
    scores = torch.tensor(batch.scores)
    out = compute_copo_advantages(scores, batch.index, batch.answers, blend_mode=blend_mode)
    shuffled = compute_copo_advantages(
        scores[perm],
        [batch.index[i] for i in perm],
        [batch.answers[i] for i in perm],
        blend_mode=blend_mode,
    )
    for name in FIELDS:
        torch.testing.assert_close(getattr(shuffled, name), getattr(out, name)[perm], rtol=1e-6, atol=1e-6)


def test_hand_computed_group_of_four() -> None:
    # answers [a, a, b, c] -> p = (1/2, 1/4, 1/4) -> H = 0.5 * 1 + 2 * 0.25 * 2 = 1.5 bits.
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0])
    out = compute_copo_advantages(scores, ["p"] * 4, ["a", "a", "b", "c"], blend_mode="soft", k=5.0, b=1.0)
    assert torch.allclose(out.entropy.double(), torch.full((4,), 1.5, dtype=torch.float64), atol=1e-6, rtol=0)
    gate = 1.0 / (1.0 + math.exp(-5.0 * (1.5 - 1.0)))  # 0.9241418...
    assert abs(gate - 0.9241418199787566) < 1e-12
    assert torch.allclose(out.local_weight.double(), torch.full((4,), gate, dtype=torch.float64), atol=1e-6)
    # mean 0.5, unbiased std sqrt(1/3) -> A = +-0.5 / (0.57735027 + 1e-6)
    a = 0.5 / (math.sqrt(1.0 / 3.0) + 1e-6)
    expected = torch.tensor([a, a, -a, -a], dtype=torch.float64)
    assert torch.allclose(out.local_adv.double(), expected, atol=1e-6, rtol=0)
    # One prompt: no global signal.
    assert torch.equal(out.global_adv, torch.zeros(4))
    assert torch.allclose(out.prompt_reward, torch.full((4,), 0.5))


def test_hand_computed_entropy_penalty_and_global() -> None:
    # Prompt A: G=4, answers [a,a,b,c], rewards [1,1,0,0]: mean 0.5, H = 1.5,
    #   lambda = (1 - 1/4) / log2(4) = 0.375 -> c = 1 - 0.5625 = 0.4375 -> R = 0.21875.
    # Prompt B: G=2, answers [x,x], rewards [1,1]: H = 0 -> R = 1.
    # Global: mean 0.609375, std of (0.21875, 1) = 0.78125 / sqrt(2).
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    index = ["A", "A", "A", "A", "B", "B"]
    answers = ["a", "a", "b", "c", "x", "x"]
    out = compute_copo_advantages(scores, index, answers, entropy_penalty=True, blend_mode="soft_with_zero")
    r = torch.tensor([0.21875] * 4 + [1.0] * 2, dtype=torch.float64)
    assert torch.allclose(out.prompt_reward.double(), r, atol=1e-6, rtol=0)
    std = 0.78125 / math.sqrt(2.0)
    g_a = (0.21875 - 0.609375) / (std + 1e-6)
    g = torch.tensor([g_a] * 4 + [-g_a] * 2, dtype=torch.float64)
    assert torch.allclose(out.global_adv.double(), g, atol=1e-6, rtol=0)
    # soft_with_zero: wrong responses take the pure global loss; B is all correct with H = 0.
    s_a, s_b = 1 / (1 + math.exp(-2.5)), 1 / (1 + math.exp(5.0))
    w = torch.tensor([s_a, s_a, 0.0, 0.0, s_b, s_b], dtype=torch.float64)
    assert torch.allclose(out.local_weight.double(), w, atol=1e-6, rtol=0)
    # B's rewards are all equal: exactly zero local advantage.
    assert torch.equal(out.local_adv[4:], torch.zeros(2))


def test_entropy_source_reward_and_missing_answers() -> None:
    scores = torch.tensor([1.0, 0.0, 0.0, 0.5])
    by_reward = compute_copo_advantages(scores, [0, 0, 0, 0], ["a", "b", "c", "d"], entropy_source="reward")
    no_answers = compute_copo_advantages(scores, [0, 0, 0, 0], None, entropy_source="answer")
    expected = 1.5  # reward classes {1}, {0, 0}, {0.5}
    assert torch.allclose(by_reward.entropy, torch.full((4,), expected))
    assert torch.equal(by_reward.entropy, no_answers.entropy)
    by_answer = compute_copo_advantages(scores, [0, 0, 0, 0], ["a", "b", "c", "d"])
    assert torch.allclose(by_answer.entropy, torch.full((4,), 2.0))


def test_none_and_empty_answer_are_one_class() -> None:
    out = compute_copo_advantages(torch.tensor([0.0, 0.0]), ["q", "q"], [None, ""])
    assert torch.equal(out.entropy, torch.zeros(2))


@pytest.mark.parametrize("blend_mode", BLEND_MODES)
@pytest.mark.parametrize("norm", [True, False])
def test_degenerate_batches_are_finite(blend_mode: str, norm: bool) -> None:
    cases = {
        "single response": (torch.tensor([1.0]), ["a"]),
        "groups of one": (torch.tensor([1.0, 0.0, 0.5]), ["a", "b", "c"]),
        "one prompt": (torch.tensor([1.0, 0.0, 1.0]), ["a", "a", "a"]),
        "all prompt rewards equal": (torch.tensor([1.0, 0.0, 0.0, 1.0]), ["a", "a", "b", "b"]),
        "all zero": (torch.zeros(6), ["a", "a", "b", "b", "c", "c"]),
    }
    for name, (scores, index) in cases.items():
        for penalty in (False, True):
            out = compute_copo_advantages(
                scores, index, None, blend_mode=blend_mode, entropy_penalty=penalty, norm_adv_by_std=norm
            )
            for field in FIELDS:
                assert bool(torch.isfinite(getattr(out, field)).all()), (name, field)
    # Size-1 groups follow verl: mean 0, std 1 -> A = r / (1 + eps).
    out = compute_copo_advantages(torch.tensor([1.0, 0.0, 0.5]), ["a", "b", "c"])
    assert torch.allclose(out.local_adv, torch.tensor([1.0, 0.0, 0.5]) / (1 + 1e-6))
    # All prompts with the same reward: no global signal at all, exactly.
    out = compute_copo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), ["a", "a", "b", "b"])
    assert torch.equal(out.global_adv, torch.zeros(4))


def test_constant_float_group_is_exactly_zero() -> None:
    # 0.1 is not exact in binary: a naive (r - mean) / (std + eps) gives rounding noise / 1e-6.
    scores = torch.full((7,), 0.1)
    scores = torch.cat([scores, torch.tensor([0.3, 0.7])])
    index = ["a"] * 7 + ["b", "b"]
    out = compute_copo_advantages(scores, index)
    assert torch.equal(out.local_adv[:7], torch.zeros(7))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.bool])
def test_any_score_dtype_computes_in_float32(dtype: torch.dtype) -> None:
    base = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    index = [0, 0, 0, 1, 1, 1]
    out = compute_copo_advantages(base.to(dtype), index)
    ref = compute_copo_advantages(base, index)
    for name in FIELDS:
        assert getattr(out, name).dtype == torch.float32
        assert torch.equal(getattr(out, name), getattr(ref, name)), name


def test_outputs_do_not_track_gradients() -> None:
    scores = torch.tensor([1.0, 0.0, 0.5, 0.25], requires_grad=True)
    out = compute_copo_advantages(scores, [0, 0, 1, 1])
    assert not any(getattr(out, name).requires_grad for name in FIELDS)


def test_numpy_scores_uids_and_answers() -> None:
    uids = np.array(["u1", "u1", "u2", "u2"], dtype=object)
    answers = np.array(["5", "6", None, ""], dtype=object)
    out = compute_copo_advantages(np.array([1.0, 0.0, 1.0, 1.0]), uids, answers)
    assert out.num_groups == 2 and out.local_adv.dtype == torch.float32
    assert torch.equal(out.entropy, torch.tensor([1.0, 1.0, 0.0, 0.0]))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        (dict(scores=torch.tensor([1.0, 0.0]), index=[0]), "index"),
        (dict(scores=torch.tensor([1.0, 0.0]), index=[0, 0], answers=["a"]), "answers"),
        (dict(scores=torch.tensor([1.0, float("nan")]), index=[0, 0]), "scores"),
        (dict(scores=torch.tensor([1.0, float("inf")]), index=[0, 0]), "scores"),
        (dict(scores=torch.tensor([]), index=[]), "scores"),
        (dict(scores=torch.ones(2, 3), index=[0, 1]), "scores"),
        (dict(scores=torch.ones(2), index=[0, 0], blend_mode="hard"), "blend_mode"),
        (dict(scores=torch.ones(2), index=[0, 0], entropy_source="tokens"), "entropy_source"),
        (dict(scores=torch.ones(2), index=[0, 0], k=-1.0), r"algorithm\.copo\.k must be"),
        (dict(scores=torch.ones(2), index=[0, 0], k=float("nan")), r"algorithm\.copo\.k must be"),
        (dict(scores=torch.ones(2), index=[[0], [1]]), "index"),
        (dict(scores=["a", "b"], index=[0, 1]), "scores"),
        (dict(scores=torch.ones(2), index=[0, 0], answers=[["a"], ["b"]]), "answers"),
    ],
)
def test_bad_input_raises_value_error_naming_argument(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        compute_copo_advantages(**kwargs)


def test_empty_batch_message_says_empty() -> None:
    with pytest.raises(ValueError, match="empty"):
        compute_copo_advantages(torch.tensor([]), [])


# --- algorithm.copo.wrong_answer_global=nonpositive: this project's variant (SPEC section 4a), not the paper's ---
@settings(max_examples=200, deadline=None)
@given(
    batch=batches(),
    blend_mode=st.sampled_from([mode for mode in BLEND_MODES if mode != "local_only"]),
    entropy_source=st.sampled_from(ENTROPY_SOURCES),
    entropy_penalty=st.booleans(),
    norm=st.booleans(),
    with_answers=st.booleans(),
)
def test_wrong_answer_global_nonpositive_matches_loop_reference(
    batch: Batch, blend_mode: str, entropy_source: str, entropy_penalty: bool, norm: bool, with_answers: bool
) -> None:
    answers = batch.answers if with_answers else None
    kwargs = dict(
        blend_mode=blend_mode,
        entropy_source=entropy_source,
        entropy_penalty=entropy_penalty,
        norm_adv_by_std=norm,
    )
    ref = ref_copo_advantages(batch.scores, batch.index, answers, wrong_answer_global="nonpositive", **kwargs)
    spread = _prompt_reward_spread(ref)
    assume(spread > 1e-4 or (spread == 0.0 and not entropy_penalty))
    scores = torch.tensor(batch.scores)
    out = compute_copo_advantages(scores, batch.index, answers, wrong_answer_global="nonpositive", **kwargs)
    _assert_matches_reference(out, ref)
    # only wrong answers' global advantages change, and only downwards to 0; every other field is the paper's
    paper = compute_copo_advantages(scores, batch.index, answers, **kwargs)
    wrong = scores == 0
    assert torch.all(out.global_adv[wrong] <= 0)
    assert torch.equal(out.global_adv[wrong], paper.global_adv[wrong].clamp_max(0))
    assert torch.equal(out.global_adv[~wrong], paper.global_adv[~wrong])
    for name in ("local_adv", "local_weight", "entropy", "prompt_reward"):
        assert torch.equal(getattr(out, name), getattr(paper, name)), name


def test_wrong_answer_global_caps_the_easy_prompts_wrong_answer() -> None:
    """The issue-37 case: a wrong answer of a mostly solved prompt takes a positive global advantage under
    soft_with_zero (the paper); the variant gives it 0 and leaves the hard prompt's wrong answers negative."""
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    index = ["easy"] * 4 + ["hard"] * 4
    paper = compute_copo_advantages(scores, index, entropy_source="reward")
    variant = compute_copo_advantages(
        scores, index, entropy_source="reward", wrong_answer_global="nonpositive"
    )
    assert paper.global_adv[3] > 0 and paper.local_weight[3] == 0  # pushed up through the pure global loss
    assert variant.global_adv[3] == 0
    torch.testing.assert_close(variant.global_adv[4:7], paper.global_adv[4:7])
    assert bool((variant.global_adv[4:7] < 0).all())


def test_wrong_answer_global_is_refused_where_the_global_term_has_no_weight() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.copo\.wrong_answer_global=nonpositive .*local_only"):
        compute_copo_advantages(
            torch.tensor([1.0, 0.0]), [0, 0], blend_mode="local_only", wrong_answer_global="nonpositive"
        )
    with pytest.raises(
        ValueError, match=r"algorithm\.copo\.wrong_answer_global must be one of keep, nonpositive"
    ):
        compute_copo_advantages(torch.tensor([1.0, 0.0]), [0, 0], wrong_answer_global="zero")
