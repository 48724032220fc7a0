"""blend_mode=local_only is verl 0.9.1's GRPO estimator + vanilla policy loss, exactly.

verl is imported here only; copo_core itself never imports it.
"""

from __future__ import annotations

import os
import uuid
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from copo_core import LOSS_AGG_MODES, agg_loss, compute_copo_advantages, copo_policy_loss
from tests.copo_core.strategies import Batch, batches

os.environ.setdefault("VERL_FORCE_DEVICE", "cpu")  # verl's group helpers pick CUDA when present
from verl.trainer.ppo import core_algos


def _verl_inputs(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """verl's estimator inputs: outcome reward on the last valid token, uid object array."""
    n = len(batch.scores)
    token_rewards = torch.zeros(n, 3)
    token_rewards[:, -1] = torch.tensor(batch.scores)
    mask = torch.ones(n, 3)
    uids = {v: str(uuid.UUID(int=i + 1)) for i, v in enumerate(dict.fromkeys(batch.index))}
    return token_rewards, mask, np.array([uids[v] for v in batch.index], dtype=object)


@settings(max_examples=100, deadline=None)
@given(batch=batches(), norm=st.booleans())
def test_local_advantage_equals_verl_grpo(batch: Batch, norm: bool) -> None:
    token_rewards, mask, uids = _verl_inputs(batch)
    ours = compute_copo_advantages(
        torch.tensor(batch.scores), uids, blend_mode="local_only", norm_adv_by_std=norm
    )
    vec, _ = core_algos.compute_grpo_vectorized_outcome_advantage(
        token_rewards, mask, uids, norm_adv_by_std_in_grpo=norm
    )
    loop, _ = core_algos.compute_grpo_outcome_advantage(
        token_rewards, mask, uids, norm_adv_by_std_in_grpo=norm
    )
    # Grid rewards: constant groups are exact in verl too, so the values coincide bit for bit
    # with grpo_vectorized (same float32 op order); the loop estimator uses torch.std.
    assert torch.equal(ours.local_adv, vec[:, 0])
    torch.testing.assert_close(ours.local_adv, loop[:, 0], rtol=1e-6, atol=1e-6)
    assert torch.equal(ours.local_weight, torch.ones_like(ours.local_weight))
    assert torch.equal(ours.blended, ours.local_adv)


def _config(low: float, high: float, c: float, global_batch_info: dict) -> object:
    return OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": low,
            "clip_ratio_high": high,
            "clip_ratio_c": c,
            "global_batch_info": global_batch_info,
        }
    )


SCALES = (
    {},
    {"dp_size": 2, "batch_num_tokens": 37, "global_batch_size": 9},
    {"loss_scale_factor": 4096},
)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("clip", [(0.2, 0.2, 3.0), (0.2, 0.28, 3.0), (0.1, 0.4, 1.2)])
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool])  # verl's ppo_loss passes a bool mask
def test_local_only_loss_equals_verl_vanilla(
    mode: str, scale: dict, clip: tuple, mask_dtype: torch.dtype
) -> None:
    # zlib, not hash(): str hashing is salted per process, which made the data vary run to run.
    gen = torch.Generator().manual_seed(zlib.crc32(f"{mode}{clip}".encode()))
    n, length = 24, 17
    scores = (torch.rand(n, generator=gen) < 0.5).float()
    index = [f"p{i // 4}" for i in range(n)]
    adv = compute_copo_advantages(scores, index, blend_mode="local_only")
    old = -torch.rand(n, length, generator=gen) * 2
    new = (old + 0.7 * torch.randn(n, length, generator=gen)).requires_grad_(True)
    mask = (torch.arange(length).unsqueeze(0) < torch.randint(0, length + 1, (n, 1), generator=gen)).float()
    token_adv = adv.local_adv.unsqueeze(-1) * mask  # what verl's estimator returns
    mask = mask.to(mask_dtype)

    low, high, c = clip
    # verl passes actor.global_batch_info (dp_size, batch_num_tokens, ...) straight to agg_loss.
    config = _config(low, high, c, dict(scale))
    v_loss, v_metrics = core_algos.compute_policy_loss_vanilla(
        old, new, token_adv, mask, loss_agg_mode=mode, config=config
    )
    (v_grad,) = torch.autograd.grad(v_loss, new)

    loss, metrics = copo_policy_loss(
        old,
        new,
        adv.local_adv,
        adv.global_adv,
        adv.local_weight,
        mask,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        loss_agg_mode=mode,
        **scale,
    )
    (grad,) = torch.autograd.grad(loss, new)

    assert torch.equal(loss, v_loss), (loss.item(), v_loss.item())
    assert torch.equal(grad, v_grad)
    assert metrics["pg_loss_global"] == 0.0
    assert metrics["pg_clipfrac_local"] == pytest.approx(v_metrics["actor/pg_clipfrac"], abs=1e-7)
    assert metrics["pg_clipfrac_lower_local"] == pytest.approx(v_metrics["actor/pg_clipfrac_lower"], abs=1e-7)
    assert metrics["ppo_kl"] == pytest.approx(v_metrics["actor/ppo_kl"], abs=1e-7)
    # The clip statistics actually exercise every branch here.
    assert 0 < metrics["pg_clipfrac_local"] < 1 and metrics["pg_clipfrac_lower_local"] > 0


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_global_only_loss_equals_verl_vanilla_on_global_adv(mode: str) -> None:
    gen = torch.Generator().manual_seed(5)
    n, length = 16, 9
    scores = torch.rand(n, generator=gen).round(decimals=1)
    index = [i // 4 for i in range(n)]
    adv = compute_copo_advantages(scores, index, blend_mode="global_only")
    old = -torch.rand(n, length, generator=gen)
    new = old + 0.5 * torch.randn(n, length, generator=gen)
    mask = (torch.rand(n, length, generator=gen) < 0.8).float()
    v_loss, _ = core_algos.compute_policy_loss_vanilla(
        old,
        new,
        adv.global_adv.unsqueeze(-1) * mask,
        mask,
        loss_agg_mode=mode,
        config=_config(0.2, 0.2, 3.0, {}),
    )
    loss, metrics = copo_policy_loss(
        old, new, adv.local_adv, adv.global_adv, adv.local_weight, mask, loss_agg_mode=mode
    )
    assert torch.equal(loss, v_loss)
    assert metrics["pg_loss_local"] == 0.0


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_equals_verl(mode: str) -> None:
    gen = torch.Generator().manual_seed(2)
    loss_mat = torch.randn(7, 13, generator=gen)
    mask = (torch.rand(7, 13, generator=gen) < 0.5).float()
    mask[2] = 0
    for kwargs in (
        {},
        {"dp_size": 3, "batch_num_tokens": 50, "global_batch_size": 12},
        {"loss_scale_factor": 99},
    ):
        assert torch.equal(
            agg_loss(loss_mat, mask, mode, **kwargs), core_algos.agg_loss(loss_mat, mask, mode, **kwargs)
        )


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("blend_mode", ["soft", "soft_with_zero", "soft_with_forced"])
def test_blended_loss_is_two_weighted_verl_losses(mode: str, blend_mode: str) -> None:
    """COPO loss = vanilla(A^L) weighted per token by w + vanilla(A^G) weighted by 1 - w.

    verl's vanilla loss multiplies token losses by ``rollout_is_weights`` before aggregating,
    which is exactly the per-response weight of each COPO term.
    """
    gen = torch.Generator().manual_seed(11)
    n, length = 20, 12
    scores = (torch.rand(n, generator=gen) < 0.5).float()
    index = [i // 5 for i in range(n)]
    answers = [str(int(x)) for x in torch.randint(0, 3, (n,), generator=gen)]
    adv = compute_copo_advantages(scores, index, answers, blend_mode=blend_mode)
    old = -torch.rand(n, length, generator=gen)
    new = (old + 0.6 * torch.randn(n, length, generator=gen)).requires_grad_(True)
    mask = (torch.rand(n, length, generator=gen) < 0.85).float()
    config = _config(0.2, 0.28, 3.0, {})
    w = adv.local_weight.unsqueeze(-1).expand(-1, length)
    v_local, m_local = core_algos.compute_policy_loss_vanilla(
        old, new, adv.local_adv.unsqueeze(-1) * mask, mask, mode, config, rollout_is_weights=w
    )
    v_global, m_global = core_algos.compute_policy_loss_vanilla(
        old, new, adv.global_adv.unsqueeze(-1) * mask, mask, mode, config, rollout_is_weights=1 - w
    )
    (v_grad,) = torch.autograd.grad(v_local + v_global, new)
    loss, metrics = copo_policy_loss(
        old,
        new,
        adv.local_adv,
        adv.global_adv,
        adv.local_weight,
        mask,
        clip_ratio_high=0.28,
        loss_agg_mode=mode,
    )
    (grad,) = torch.autograd.grad(loss, new)
    assert abs(metrics["pg_loss_local"]) > 1e-4 and abs(metrics["pg_loss_global"]) > 1e-4  # both terms active
    # Same math, different float32 rounding order (w * (-A * g) vs (-A * w) * g).
    torch.testing.assert_close(loss, v_local + v_global, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, v_grad, rtol=1e-5, atol=1e-8)
    assert metrics["pg_loss_local"] == pytest.approx(v_local.item(), rel=1e-5, abs=1e-6)
    assert metrics["pg_loss_global"] == pytest.approx(v_global.item(), rel=1e-5, abs=1e-6)
    assert metrics["pg_clipfrac_local"] == pytest.approx(m_local["actor/pg_clipfrac"], abs=1e-7)
    assert metrics["pg_clipfrac_global"] == pytest.approx(m_global["actor/pg_clipfrac"], abs=1e-7)
    assert metrics["pg_clipfrac_lower_global"] == pytest.approx(m_global["actor/pg_clipfrac_lower"], abs=1e-7)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_rollout_is_weights_like_verl(mode: str) -> None:
    gen = torch.Generator().manual_seed(13)
    n, length = 8, 6
    adv = compute_copo_advantages(
        (torch.rand(n, generator=gen) < 0.5).float(), [i // 4 for i in range(n)], blend_mode="local_only"
    )
    old = -torch.rand(n, length, generator=gen)
    new = old + 0.5 * torch.randn(n, length, generator=gen)
    mask = torch.ones(n, length)
    is_weights = torch.rand(n, length, generator=gen) * 2
    v_loss, _ = core_algos.compute_policy_loss_vanilla(
        old, new, adv.local_adv.unsqueeze(-1) * mask, mask, mode, _config(0.2, 0.2, 3.0, {}), is_weights
    )
    loss, _ = copo_policy_loss(
        old,
        new,
        adv.local_adv,
        adv.global_adv,
        adv.local_weight,
        mask,
        loss_agg_mode=mode,
        rollout_is_weights=is_weights,
    )
    assert torch.equal(loss, v_loss)


# --- algorithm.copo.local_estimator: each local term is verl's estimator of the same name, exactly ---------
@settings(max_examples=100, deadline=None)
@given(batch=batches())
def test_local_estimator_drgrpo_equals_verl_grpo_without_std(batch: Batch) -> None:
    """drgrpo is verl's grpo with norm_adv_by_std_in_grpo=false, whatever COPO's norm_adv_by_std says."""
    token_rewards, mask, uids = _verl_inputs(batch)
    vec, _ = core_algos.compute_grpo_vectorized_outcome_advantage(
        token_rewards, mask, uids, norm_adv_by_std_in_grpo=False
    )
    loop, _ = core_algos.compute_grpo_outcome_advantage(
        token_rewards, mask, uids, norm_adv_by_std_in_grpo=False
    )
    for norm in (True, False):
        ours = compute_copo_advantages(
            torch.tensor(batch.scores),
            uids,
            blend_mode="local_only",
            norm_adv_by_std=norm,
            local_estimator="drgrpo",
        )
        assert torch.equal(ours.local_adv, vec[:, 0])
        assert torch.equal(ours.local_adv, loop[:, 0])  # grid rewards: the group means are exact
        assert torch.equal(ours.blended, ours.local_adv)


@settings(max_examples=100, deadline=None)
@given(batch=batches(), norm=st.booleans())
def test_local_estimator_rloo_equals_verl_rloo(batch: Batch, norm: bool) -> None:
    """rloo is verl's compute_rloo_outcome_advantage bit for bit (a size-1 group keeps its reward, as there)."""
    token_rewards, mask, uids = _verl_inputs(batch)
    loop, _ = core_algos.compute_rloo_outcome_advantage(token_rewards, mask, uids)
    ours = compute_copo_advantages(
        torch.tensor(batch.scores),
        uids,
        blend_mode="local_only",
        norm_adv_by_std=norm,
        local_estimator="rloo",
    )
    assert torch.equal(ours.local_adv, loop[:, 0])
    assert torch.equal(ours.local_weight, torch.ones_like(ours.local_weight))
    assert torch.equal(ours.blended, ours.local_adv)
    # verl's vectorised rloo gives a size-1 group 0 instead: equal wherever every group has >= 2 responses
    vec, _ = core_algos.compute_rloo_vectorized_outcome_advantage(token_rewards, mask, uids)
    sizes = {uid: list(uids).count(uid) for uid in set(uids)}
    grouped = torch.tensor([sizes[uid] > 1 for uid in uids])
    torch.testing.assert_close(ours.local_adv[grouped], vec[grouped, 0], rtol=1e-6, atol=1e-6)
