"""The installed COPO loss, called per micro-batch the way verl's engine calls a loss, equals
copo_core's loss on the whole mini-batch (values and gradients), and local_only equals verl's
own grpo + vanilla ppo_loss."""

from __future__ import annotations

import pytest
import torch
from verl.trainer.ppo.core_algos import agg_loss, compute_grpo_outcome_advantage, kl_penalty
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.losses import ppo_loss

from copo_core import CopoConfig, copo_policy_loss
from recipe.copo.actor_loss import copo_ppo_loss
from recipe.copo.step import StepSettings, advantage_step
from tests.recipe.copo.copo_batches import (
    actor_config,
    make_step_batch,
    nested_model_output,
    padded_response_logps,
    set_global_batch_info,
    worker_minibatch,
)

MICRO = 3  # micro-batch size; the shuffled batch puts members of one group in different micro-batches


def _step_fields(batch, blend_mode: str = "soft_with_zero") -> dict[str, torch.Tensor]:
    settings = StepSettings(estimator="copo", copo=CopoConfig(blend_mode=blend_mode))
    return advantage_step(batch.step_inputs(), settings).fields


def _run_micro_batches(loss_fn, config, data, seq_logps) -> tuple[torch.Tensor, list[dict]]:
    """Sum of the per-micro-batch losses (what the engine back-propagates) and their metrics."""
    set_global_batch_info(data, MICRO)
    micro_batches = tu.chunk_tensordict(data, len(data) // MICRO + (len(data) % MICRO > 0))
    assert len(micro_batches) > 1
    total = torch.zeros(())
    metrics = []
    start = 0
    for micro in micro_batches:
        rows = range(start, start + len(micro))
        start += len(micro)
        loss, m = loss_fn(
            config=config, model_output={"log_probs": nested_model_output(seq_logps, rows)}, data=micro
        )
        total = total + loss
        metrics.append(m)
    assert start == len(data)
    return total, metrics


@pytest.mark.parametrize(
    ("loss_agg_mode", "extra"),
    [
        ("seq-mean-token-mean", []),
        ("token-mean", []),
        ("seq-mean-token-sum", []),
        ("seq-mean-token-sum-norm", ["actor_rollout_ref.actor.loss_scale_factor=8"]),
    ],
)
@pytest.mark.parametrize("use_kl", [False, True])
def test_micro_batched_copo_loss_equals_whole_batch(
    loss_agg_mode: str, extra: list[str], use_kl: bool
) -> None:
    batch = make_step_batch(seed=3)
    fields = _step_fields(batch)
    copo_fields = {k: v for k, v in fields.items() if k.startswith("copo_")}
    config, _ = actor_config(
        f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}",
        "actor_rollout_ref.actor.clip_ratio_low=0.15",
        "actor_rollout_ref.actor.clip_ratio_high=0.25",
        f"actor_rollout_ref.actor.use_kl_loss={str(use_kl).lower()}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef=0.05",
        *extra,
    )
    data, seq_logps, old, ref = worker_minibatch(batch, copo_fields)
    total, metrics = _run_micro_batches(copo_ppo_loss, config, data, seq_logps)
    total.backward()
    grads = [p.grad.clone() for p in seq_logps]

    # Reference: copo_core on the whole (padded) batch, normalised by the whole batch itself.
    leaves = [p.detach().clone().requires_grad_(True) for p in seq_logps]
    new = padded_response_logps(batch, leaves)
    mask = batch.response_mask()
    scale = config.loss_scale_factor
    ref_loss, _ = copo_policy_loss(
        old,
        new,
        copo_fields["copo_local_adv"],
        copo_fields["copo_global_adv"],
        copo_fields["copo_local_weight"],
        mask,
        clip_ratio_low=0.15,
        clip_ratio_high=0.25,
        loss_agg_mode=loss_agg_mode,
        loss_scale_factor=scale,
    )
    if use_kl:
        kld = kl_penalty(logprob=new, ref_logprob=ref, kl_penalty="low_var_kl")
        ref_loss = ref_loss + 0.05 * agg_loss(kld, mask.bool(), loss_agg_mode, loss_scale_factor=scale)
    ref_loss.backward()

    torch.testing.assert_close(total, ref_loss.detach(), rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, [p.grad for p in leaves], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert all(
        {"actor/pg_loss", "actor/pg_loss_local", "actor/pg_loss_global", "actor/pg_clipfrac_local"} <= set(m)
        for m in metrics
    )
    assert ("kl_loss" in metrics[0]) == use_kl


def test_loss_parts_sum_over_micro_batches_to_whole_batch_parts() -> None:
    batch = make_step_batch(seed=5)
    copo_fields = {k: v for k, v in _step_fields(batch).items() if k.startswith("copo_")}
    config, _ = actor_config("actor_rollout_ref.actor.use_kl_loss=false")
    data, seq_logps, old, _ = worker_minibatch(batch, copo_fields)
    _, metrics = _run_micro_batches(copo_ppo_loss, config, data, seq_logps)
    new = padded_response_logps(batch, seq_logps).detach()
    _, whole = copo_policy_loss(
        old,
        new,
        copo_fields["copo_local_adv"],
        copo_fields["copo_global_adv"],
        copo_fields["copo_local_weight"],
        batch.response_mask(),
    )
    for part in ("pg_loss_local", "pg_loss_global", "pg_loss"):
        # verl merges a metric's per-micro-batch values and aggregates them with the Metric's rule
        merged = Metric(aggregation=metrics[0][f"actor/{part}"].aggregation)
        for m in metrics:
            merged.append(m[f"actor/{part}"])
        assert merged.aggregation == AggregationType.SUM
        assert merged.aggregate() == pytest.approx(whole[part], rel=1e-5, abs=1e-7)


def test_local_only_equals_verl_grpo_and_vanilla_loss() -> None:
    batch = make_step_batch(seed=11)
    fields = _step_fields(batch, blend_mode="local_only")
    mask = batch.response_mask()

    # advantages: verl's own grpo estimator on the same batch
    verl_adv, _ = compute_grpo_outcome_advantage(
        token_level_rewards=batch.token_level_rewards(), response_mask=mask, index=list(batch.uids)
    )
    torch.testing.assert_close(fields["copo_local_adv"], verl_adv, rtol=0, atol=1e-6)
    torch.testing.assert_close(fields["advantages"], verl_adv, rtol=0, atol=1e-6)

    common = ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=low_var_kl"]
    copo_config, _ = actor_config(*common)
    vanilla_config, _ = actor_config(*common, "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla")
    send = {k: v for k, v in fields.items() if k.startswith("copo_")}
    send["advantages"] = verl_adv

    data, seq_logps, _, _ = worker_minibatch(batch, send, seed=4)
    copo_total, _ = _run_micro_batches(copo_ppo_loss, copo_config, data, seq_logps)
    copo_total.backward()
    copo_grads = [p.grad.clone() for p in seq_logps]

    data2, seq_logps2, _, _ = worker_minibatch(batch, send, seed=4)
    verl_total, _ = _run_micro_batches(ppo_loss, vanilla_config, data2, seq_logps2)
    verl_total.backward()

    torch.testing.assert_close(copo_total, verl_total, rtol=1e-6, atol=1e-7)
    for got, want in zip(copo_grads, [p.grad for p in seq_logps2], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)


def test_missing_copo_fields_raise_a_clear_error() -> None:
    batch = make_step_batch(seed=2)
    config, _ = actor_config()
    data, seq_logps, _, _ = worker_minibatch(batch, {"advantages": torch.zeros(batch.response_mask().shape)})
    set_global_batch_info(data, MICRO)
    with pytest.raises(KeyError, match="main_copo"):
        copo_ppo_loss(
            config=config,
            model_output={"log_probs": nested_model_output(seq_logps, range(batch.n))},
            data=data,
        )
