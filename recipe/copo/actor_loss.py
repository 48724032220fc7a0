"""COPO's actor loss, installed on verl's actor workers with ``set_loss_fn``.

verl 0.9.1's engine calls ``loss_fn(model_output=..., data=micro_batch, dp_group=...)`` once per
micro-batch, where ``micro_batch`` is a TensorDict in verl's no-padding layout (nested tensors)
that also carries the global normalisers ``dp_size``, ``batch_num_tokens`` and
``global_batch_size``. This function is verl's ``verl.workers.utils.losses.ppo_loss`` with the
policy-gradient term replaced by ``copo_core.copo_policy_loss``: everything group-level (the
local/global advantages and the per-response weight) was computed by the driver over the whole
step batch and arrives as per-token fields, because verl's balancing splits groups across
mini-batches, micro-batches and data-parallel ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
from verl.utils.metric import AggregationType, Metric
from verl.workers.config import ActorConfig
from verl.workers.utils.padding import no_padding_2_padding

from copo_core import copo_policy_loss
from recipe.copo.fields import COPO_FIELDS, GLOBAL_ADV, LOCAL_ADV, LOCAL_WEIGHT
from recipe.tracking import names

# copo_policy_loss metrics that are parts of the loss (normalised by the global batch, so summed
# over micro-batches like verl's pg_loss); the others are per-micro-batch fractions (averaged).
_LOSS_PART_METRICS = ("pg_loss_local", "pg_loss_global")


def clip_ratios(config: ActorConfig) -> tuple[float, float, float]:
    """(low, high, c) exactly as verl's compute_policy_loss_vanilla reads them."""
    clip_ratio = config.clip_ratio
    low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_ratio
    high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_ratio
    clip_ratio_c = config.get("clip_ratio_c", 3.0)
    return float(low), float(high), float(clip_ratio_c)


def copo_ppo_loss(
    config: ActorConfig, model_output: dict[str, Any], data: TensorDict, dp_group: Any = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """COPO loss for one micro-batch, called the way verl's engine calls ``ppo_loss``.

    Args:
        config: the actor's ``ActorConfig`` (clip ratios, loss_agg_mode, KL and entropy settings).
        model_output: ``log_probs`` (and ``entropy`` when requested), nested (B, seq_len_i).
        data: the micro-batch; besides verl's fields it must hold ``copo_local_adv``,
            ``copo_global_adv`` and ``copo_local_weight``, nested (B, response_len_i).
        dp_group: unused (normalisers arrive in ``data``), kept for verl's signature.

    Returns:
        (loss, metrics): the scalar loss for backward, normalised over the global mini-batch as
        verl's ``ppo_loss``; metrics use verl's ``Metric`` aggregation (``actor/`` is prefixed
        by the trainer).
    """
    missing = [name for name in (*COPO_FIELDS, "old_log_probs", "response_mask") if name not in data]
    if missing:
        raise KeyError(
            f"COPO loss: the micro-batch lacks {missing}. The COPO fields are written by the COPO trainer's "
            "advantage step: launch with `python -m recipe.copo.main_copo` and algorithm.adv_estimator=copo."
        )
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy")
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)

    # global batch info for loss aggregation (same bookkeeping as verl's ppo_loss)
    config.global_batch_info["dp_size"] = data["dp_size"]
    config.global_batch_info["batch_num_tokens"] = data["batch_num_tokens"]
    config.global_batch_info["global_batch_size"] = data["global_batch_size"]
    config.global_batch_info["loss_scale_factor"] = config.loss_scale_factor
    if (
        data["dp_size"] > 1
        or data["batch_num_tokens"] is not None
        or data["global_batch_size"] is not None
        or config.loss_scale_factor is not None
    ):
        metric_aggregation = AggregationType.SUM
    else:
        metric_aggregation = AggregationType.MEAN

    fields = ["response_mask", "old_log_probs", *COPO_FIELDS]
    if "rollout_is_weights" in data:
        fields.append("rollout_is_weights")
    if "ref_log_prob" in data:
        fields.append("ref_log_prob")
    data = data.select(*fields).to_padded_tensor()

    response_mask = data["response_mask"].to(bool)
    loss_agg_mode = config.loss_agg_mode
    clip_low, clip_high, clip_c = clip_ratios(config)
    pg_loss, pg_metrics = copo_policy_loss(
        data["old_log_probs"],
        log_prob,
        data[LOCAL_ADV],
        data[GLOBAL_ADV],
        data[LOCAL_WEIGHT],
        response_mask,
        clip_ratio_low=clip_low,
        clip_ratio_high=clip_high,
        clip_ratio_c=clip_c,
        loss_agg_mode=loss_agg_mode,
        rollout_is_weights=data.get("rollout_is_weights", None),
        **config.global_batch_info,
    )

    metrics: dict[str, Any] = {}
    for key, value in pg_metrics.items():
        if key == "pg_loss":
            continue
        aggregation = metric_aggregation if key in _LOSS_PART_METRICS else AggregationType.MEAN
        metrics[names.ACTOR_PREFIX + key] = Metric(value=value, aggregation=aggregation)
    metrics[names.ACTOR_PG_LOSS] = Metric(value=pg_loss, aggregation=metric_aggregation)
    policy_loss = pg_loss

    if entropy is not None:
        entropy_loss = agg_loss(
            loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
        )
        policy_loss = policy_loss - config.entropy_coeff * entropy_loss
        metrics[names.ACTOR_ENTROPY_LOSS] = Metric(value=entropy_loss, aggregation=metric_aggregation)

    if config.use_kl_loss:
        kld = kl_penalty(logprob=log_prob, ref_logprob=data["ref_log_prob"], kl_penalty=config.kl_loss_type)
        kl_loss = agg_loss(
            loss_mat=kld, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
        )
        policy_loss = policy_loss + kl_loss * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=metric_aggregation)
        metrics["kl_coef"] = config.kl_loss_coef

    return policy_loss, metrics
