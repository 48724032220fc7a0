"""copo_policy_loss and agg_loss against the token-by-token loop reference; shapes, dtypes, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copo_core import LOSS_AGG_MODES, agg_loss, copo_policy_loss
from tests.copo_core.reference import ref_agg_loss, ref_copo_policy_loss

METRIC_KEYS = {
    "pg_loss",
    "pg_loss_local",
    "pg_loss_global",
    "pg_clipfrac_local",
    "pg_clipfrac_global",
    "pg_clipfrac_lower_local",
    "pg_clipfrac_lower_global",
    "ppo_kl",
}


def make_inputs(
    seed: int, n: int, length: int, token_level: bool, spread: float = 0.6
) -> dict[str, torch.Tensor]:
    """Random log-probs with ratios on both sides of every clip bound; ragged masks incl. an empty row."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, length, generator=gen) * 2.0
    new = old + spread * torch.randn(n, length, generator=gen)
    lengths = torch.randint(0, length + 1, (n,), generator=gen)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    shape = (n, length) if token_level else (n,)
    local_adv = torch.randn(shape, generator=gen)
    global_adv = torch.randn(shape, generator=gen)
    weight = torch.rand(shape, generator=gen)
    # Exact zeros and exact 0/1 weights occur in practice (constant groups, hard modes).
    local_adv[0] = 0.0
    weight[n // 2] = 1.0
    weight[n - 1] = 0.0
    return {"old": old, "new": new, "mask": mask, "a_l": local_adv, "a_g": global_adv, "w": weight}


def _per_token(x: torch.Tensor, length: int) -> list[list[float]]:
    return (x if x.ndim == 2 else x.unsqueeze(-1).expand(-1, length)).double().tolist()


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 6),
    length=st.integers(1, 7),
    token_level=st.booleans(),
    mode=st.sampled_from(LOSS_AGG_MODES),
    clip=st.sampled_from(((0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.3, 1.5))),
    scale=st.sampled_from(
        ({}, {"loss_scale_factor": 3.0}, {"dp_size": 2, "batch_num_tokens": 11.0, "global_batch_size": 5.0})
    ),
)
def test_matches_loop_reference(
    seed: int, n: int, length: int, token_level: bool, mode: str, clip: tuple, scale: dict
) -> None:
    x = make_inputs(seed, n, length, token_level)
    low, high, c = clip
    loss, metrics = copo_policy_loss(
        x["old"],
        x["new"],
        x["a_l"],
        x["a_g"],
        x["w"],
        x["mask"],
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        loss_agg_mode=mode,
        **scale,
    )
    if x["mask"].sum() == 0:
        return  # every reference metric divides by the token count; covered by the empty-mask test
    ref = ref_copo_policy_loss(
        x["old"].double().tolist(),
        x["new"].double().tolist(),
        _per_token(x["a_l"], length),
        _per_token(x["a_g"], length),
        _per_token(x["w"], length),
        x["mask"].tolist(),
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        loss_agg_mode=mode,
        **scale,
    )
    assert set(metrics) == METRIC_KEYS
    assert all(isinstance(v, float) for v in metrics.values())
    for key in METRIC_KEYS:
        assert metrics[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-5), key
    assert loss.item() == pytest.approx(ref["pg_loss"], rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_matches_reference(mode: str) -> None:
    gen = torch.Generator().manual_seed(1)
    loss_mat = torch.randn(5, 9, generator=gen)
    mask = (torch.rand(5, 9, generator=gen) < 0.6).float()
    mask[3] = 0.0
    for kwargs in (
        {},
        {"loss_scale_factor": 4.0},
        {"dp_size": 4, "batch_num_tokens": 30, "global_batch_size": 9},
    ):
        got = agg_loss(loss_mat, mask, mode, **kwargs).item()
        assert got == pytest.approx(
            ref_agg_loss(loss_mat.tolist(), mask.tolist(), mode, **kwargs), rel=1e-6, abs=1e-6
        )


def test_per_response_equals_broadcast_per_token() -> None:
    x = make_inputs(3, 6, 11, token_level=False)
    expand = lambda t: t.unsqueeze(-1).expand(-1, 11).contiguous()  # noqa: E731
    for mode in LOSS_AGG_MODES:
        loss_1d, m_1d = copo_policy_loss(
            x["old"], x["new"], x["a_l"], x["a_g"], x["w"], x["mask"], loss_agg_mode=mode
        )
        loss_2d, m_2d = copo_policy_loss(
            x["old"],
            x["new"],
            expand(x["a_l"]),
            expand(x["a_g"]),
            expand(x["w"]),
            x["mask"],
            loss_agg_mode=mode,
        )
        assert torch.equal(loss_1d, loss_2d), mode
        assert m_1d == pytest.approx(m_2d, rel=1e-6, abs=1e-7), mode


def test_loss_is_sum_of_parts_and_has_grad() -> None:
    x = make_inputs(4, 5, 8, token_level=False)
    new = x["new"].clone().requires_grad_(True)
    loss, metrics = copo_policy_loss(x["old"], new, x["a_l"], x["a_g"], x["w"], x["mask"])
    assert loss.ndim == 0 and loss.dtype == torch.float32 and loss.requires_grad
    assert metrics["pg_loss"] == pytest.approx(metrics["pg_loss_local"] + metrics["pg_loss_global"], abs=1e-6)
    loss.backward()
    assert new.grad is not None and bool(torch.isfinite(new.grad).all())
    # Masked tokens get no gradient.
    assert torch.equal(new.grad[x["mask"] == 0], torch.zeros(int((x["mask"] == 0).sum())))


def test_bf16_log_probs_compute_in_float32() -> None:
    x = make_inputs(5, 4, 6, token_level=False)
    old16, new16 = x["old"].bfloat16(), x["new"].bfloat16()
    loss16, m16 = copo_policy_loss(old16, new16, x["a_l"].bfloat16(), x["a_g"], x["w"], x["mask"].bool())
    loss32, m32 = copo_policy_loss(
        old16.float(), new16.float(), x["a_l"].bfloat16().float(), x["a_g"], x["w"], x["mask"]
    )
    assert loss16.dtype == torch.float32
    assert torch.equal(loss16, loss32)
    assert m16 == m32


def test_empty_mask_gives_finite_values() -> None:
    x = make_inputs(6, 3, 4, token_level=False)
    zeros = torch.zeros_like(x["mask"])
    for mode in ("token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        loss, metrics = copo_policy_loss(
            x["old"], x["new"], x["a_l"], x["a_g"], x["w"], zeros, loss_agg_mode=mode
        )
        assert metrics["pg_clipfrac_local"] == 0.0 and metrics["ppo_kl"] == 0.0
        # verl divides 0 by a zero sequence count here too (NaN); token-sum stays 0.
        if mode == "token-sum":
            assert loss.item() == 0.0


def test_ratio_is_clamped_like_verl() -> None:
    # log-ratio 50 is clamped to 20: with A > 0 the token loss is -A * (1 + clip_high).
    old = torch.zeros(1, 2)
    new = torch.tensor([[50.0, -50.0]])
    mask = torch.ones(1, 2)
    loss, metrics = copo_policy_loss(
        old,
        new,
        torch.tensor([1.0]),
        torch.tensor([0.0]),
        torch.tensor([1.0]),
        mask,
        loss_agg_mode="token-sum",
    )
    # token 0: -1 * min(e^20, 1.2) = -1.2; token 1: -1 * min(e^-20, 1.2) = -e^-20
    assert loss.item() == pytest.approx(-1.2 - torch.exp(torch.tensor(-20.0)).item(), abs=1e-7)
    assert metrics["ppo_kl"] == pytest.approx(0.0, abs=1e-6)  # -(20 - 20) / 2
    assert metrics["pg_clipfrac_local"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("change", "argument"),
    [
        ({"old": torch.zeros(3, 5)}, "old_log_prob"),
        ({"mask": torch.ones(4, 4)}, "response_mask"),
        ({"new": torch.zeros(4)}, "log_prob"),
        ({"a_l": torch.zeros(3)}, "local_adv"),
        ({"a_g": torch.zeros(4, 3)}, "global_adv"),
        ({"w": torch.zeros(5)}, "local_weight"),
    ],
)
def test_shape_mismatch_raises(change: dict, argument: str) -> None:
    x = make_inputs(7, 4, 5, token_level=False)
    x.update(change)
    with pytest.raises(ValueError, match=argument):
        copo_policy_loss(x["old"], x["new"], x["a_l"], x["a_g"], x["w"], x["mask"])


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"loss_agg_mode": "seq-sum"}, "loss_agg_mode"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c"),
        ({"clip_ratio_low": -0.1}, "clip_ratio_low"),
        ({"clip_ratio_high": float("nan")}, "clip_ratio_high"),
        ({"loss_agg_mode": "token-mean", "dp_size": 2}, "batch_num_tokens"),
        ({"loss_agg_mode": "seq-mean-token-mean", "dp_size": 2}, "global_batch_size"),
        ({"rollout_is_weights": torch.ones(4)}, "rollout_is_weights"),
    ],
)
def test_bad_options_raise(kwargs: dict, argument: str) -> None:
    x = make_inputs(8, 4, 5, token_level=False)
    with pytest.raises(ValueError, match=argument):
        copo_policy_loss(x["old"], x["new"], x["a_l"], x["a_g"], x["w"], x["mask"], **kwargs)


def test_empty_batch_raises() -> None:
    empty = torch.zeros(0, 5)
    with pytest.raises(ValueError, match="empty"):
        copo_policy_loss(empty, empty, torch.zeros(0), torch.zeros(0), torch.zeros(0), empty)


def test_global_normalisers_as_tensors() -> None:
    x = make_inputs(9, 4, 5, token_level=False)
    kwargs = {
        "dp_size": 2,
        "batch_num_tokens": torch.tensor(40),
        "global_batch_size": torch.tensor(8.0).double(),
    }
    for mode in LOSS_AGG_MODES:
        loss, _ = copo_policy_loss(
            x["old"], x["new"], x["a_l"], x["a_g"], x["w"], x["mask"], loss_agg_mode=mode, **kwargs
        )
        ref, _ = copo_policy_loss(
            x["old"],
            x["new"],
            x["a_l"],
            x["a_g"],
            x["w"],
            x["mask"],
            loss_agg_mode=mode,
            dp_size=2,
            batch_num_tokens=40,
            global_batch_size=8,
        )
        assert loss.dtype == torch.float32
        assert loss.item() == pytest.approx(ref.item(), rel=1e-6, abs=1e-7), mode
