"""One step's advantages, loss and optimizer update, in verl's padded layout.

* :class:`UpdateBatch`: the step batch as verl's actor sees it once padded: prompts left-padded,
  responses right-padded, ``position_ids`` counting real tokens only.
* :func:`compute_advantages`: GRPO through verl's ``compute_grpo_outcome_advantage`` (the token
  rewards hold the score on the last response token, as verl's reward loop writes them); COPO
  through ``recipe.copo.step.advantage_step`` (the driver-side step of ``main_copo``).
* :func:`response_log_probs`: ``log_softmax(logits / T)`` of the response tokens, as verl's actor.
* :func:`policy_loss`: verl's registered ``vanilla`` loss (GRPO) or ``copo_core.copo_policy_loss``
  (COPO), with the global normalisers verl's actor passes for one mini-batch on one rank.
* :func:`optimizer_step`: verl's engine rule: clip the gradient norm, skip a non-finite step, then
  advance the learning-rate schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from recipe.copo.fields import COPO_FIELDS, GLOBAL_ADV, LOCAL_ADV, LOCAL_WEIGHT
from recipe.copo.step import StepBatch, advantage_step
from recipe.study.fast.rollout import Group
from recipe.study.fast.settings import FastSettings
from recipe.tracking import names


@dataclass
class UpdateBatch:
    """N responses in verl's padded layout (P prompt columns, L response columns).

    Attributes:
        input_ids: (N, P + L) prompt (left-padded) then response (right-padded).
        attention_mask: (N, P + L) 1 on real tokens.
        position_ids: (N, P + L) position of each real token in its sequence (0 on left padding).
        response_mask: (N, L) float 1 on response tokens.
        old_log_probs: (N, L) log-probs of the response tokens under the sampling policy (0 on padding).
        scores: (N,) rewards. uids: N group ids. preds: N extracted answers.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    old_log_probs: torch.Tensor
    scores: torch.Tensor
    uids: list[str]
    preds: list[str | None]

    @property
    def response_width(self) -> int:
        return int(self.response_mask.shape[1])

    @property
    def responses(self) -> torch.Tensor:
        return self.input_ids[:, -self.response_width :]


def batch_from_groups(groups: Sequence[Group], pad_token_id: int) -> UpdateBatch:
    """Stack the groups' responses (group-major) into an :class:`UpdateBatch`."""
    rows = [(g, i) for g in groups for i in range(len(g.responses))]
    prompt_width = max(len(g.prompt.ids) for g in groups)
    response_width = max(len(g.responses[i]) for g, i in rows)
    n = len(rows)
    input_ids = torch.full((n, prompt_width + response_width), int(pad_token_id), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    old = torch.zeros((n, response_width), dtype=torch.float32)
    for r, (g, i) in enumerate(rows):
        prompt, response = g.prompt.ids, g.responses[i]
        input_ids[r, prompt_width - len(prompt) : prompt_width] = torch.tensor(prompt)
        attention_mask[r, prompt_width - len(prompt) : prompt_width] = 1
        input_ids[r, prompt_width : prompt_width + len(response)] = torch.tensor(response)
        attention_mask[r, prompt_width : prompt_width + len(response)] = 1
        old[r, : len(response)] = torch.tensor(g.log_probs[i], dtype=torch.float32)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return UpdateBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_mask=attention_mask[:, prompt_width:].to(torch.float32),
        old_log_probs=old,
        scores=torch.tensor([g.scores[i] for g, i in rows], dtype=torch.float32),
        uids=[g.uid for g, _ in rows],
        preds=[g.preds[i] for g, i in rows],
    )


def token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(N, L) rewards with each score on its response's last token (verl's ``rm_scores``)."""
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    rewards = torch.zeros_like(response_mask, dtype=torch.float32)
    rewards[torch.arange(len(scores)), last] = scores.float()
    return rewards


def session_keys(uids: Sequence[str]) -> list[str]:
    """verl's row keys ``{uid}_{session}_{output}``: each response of a single-turn group is its own
    session (its j-th sample) with one output, as verl's agent loop names them."""
    seen: dict[str, int] = {}
    keys = []
    for uid in uids:
        keys.append(f"{uid}_{seen.get(uid, 0)}_0")
        seen[uid] = seen.get(uid, 0) + 1
    return keys


def compute_advantages(batch: UpdateBatch, settings: FastSettings, global_step: int) -> dict[str, Any]:
    """``{"advantages": (N, L), [COPO fields (N, L)], "metrics": {...}}`` for the step batch."""
    if not settings.row.recipe_step:  # verl's own step: GRPO
        from verl.trainer.ppo import core_algos

        advantages, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=token_rewards(batch.scores, batch.response_mask),
            response_mask=batch.response_mask,
            index=np.array(batch.uids, dtype=object),
            norm_adv_by_std_in_grpo=settings.norm_adv_by_std,
        )
        return {"advantages": advantages, "metrics": {}}
    assert settings.step is not None
    n = len(batch.uids)
    result = advantage_step(
        StepBatch(
            scores=batch.scores,
            uids=batch.uids,
            keys=session_keys(batch.uids),
            is_padding=[False] * n,
            response_mask=batch.response_mask,
            preds=batch.preds,
        ),
        settings.step,
        global_step=global_step,
    )
    return {**result.fields, "metrics": result.metrics}


def response_log_probs(
    model: torch.nn.Module, batch: UpdateBatch, temperature: float, group_size: int = 1
) -> torch.Tensor:
    """(N, L) ``log_softmax(logits / temperature)`` of each response token (0 outside the mask).

    With ``group_size`` G > 1 the rows must come in groups of G sharing one prompt (as
    :func:`batch_from_groups` builds them): each prompt then runs forward once and its keys and values
    serve its G responses (a quarter of the tokens at G = 4 with 35-token prompts), with gradients
    flowing back through the shared prompt. The values equal the padded forward of every row up to
    float rounding (tests/recipe/study/test_fast.py).
    """
    if group_size > 1:
        return _shared_prompt_log_probs(model, batch, temperature, group_size)
    width = batch.response_width
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=width + 1,
    )
    logits = out.logits[:, :-1, :].float() / temperature  # positions P-1 .. P+L-2 predict the responses
    return _gather(logits, batch)


def _gather(logits: torch.Tensor, batch: UpdateBatch) -> torch.Tensor:
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, batch.responses.unsqueeze(-1)).squeeze(-1)
    return log_probs * batch.response_mask


def _shared_prompt_log_probs(
    model: torch.nn.Module, batch: UpdateBatch, temperature: float, g: int
) -> torch.Tensor:
    n, width = batch.input_ids.shape
    if n % g:
        raise ValueError(f"shared-prompt forward: {n} rows are not groups of {g}")
    p = width - batch.response_width
    prompts = batch.input_ids[:, :p].view(n // g, g, p)
    if not torch.equal(prompts, prompts[:, :1].expand(-1, g, -1)):
        raise ValueError(f"shared-prompt forward: the rows do not come in groups of {g} with one prompt")
    first = model(
        input_ids=prompts[:, 0],
        attention_mask=batch.attention_mask[::g, :p],
        position_ids=batch.position_ids[::g, :p],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = first.past_key_values
    for layer in cache.layers:  # each prompt's keys and values, once per response of its group
        layer.keys = layer.keys.repeat_interleave(g, dim=0)
        layer.values = layer.values.repeat_interleave(g, dim=0)
    rest = model(
        input_ids=batch.input_ids[:, p:],
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids[:, p:],
        past_key_values=cache,
        use_cache=False,
    )
    logits = torch.cat([first.logits[:, -1:].repeat_interleave(g, dim=0), rest.logits[:, :-1]], dim=1)
    return _gather(logits.float() / temperature, batch)


def policy_loss(
    settings: FastSettings, batch: UpdateBatch, log_prob: torch.Tensor, fields: dict[str, Any]
) -> tuple[torch.Tensor, dict[str, float]]:
    """The actor's policy loss for the whole mini-batch (one micro-batch, one rank), and its metrics."""
    actor = settings.actor
    mask = batch.response_mask
    info = {
        "dp_size": 1,
        "batch_num_tokens": int(mask.sum().item()),
        "global_batch_size": int(mask.shape[0]),
        "loss_scale_factor": actor.loss_scale_factor,
    }
    if settings.loss_mode == "vanilla":
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        actor.global_batch_info.update(info)
        loss, metrics = get_policy_loss_fn("vanilla")(
            old_log_prob=batch.old_log_probs,
            log_prob=log_prob,
            advantages=fields["advantages"],
            response_mask=mask.bool(),
            loss_agg_mode=actor.loss_agg_mode,
            config=actor,
            rollout_is_weights=None,
        )
        return loss, {k: float(v) for k, v in metrics.items()}
    from copo_core import copo_policy_loss
    from recipe.copo.actor_loss import clip_ratios

    low, high, c = clip_ratios(actor)
    loss, metrics = copo_policy_loss(
        batch.old_log_probs,
        log_prob,
        fields[LOCAL_ADV],
        fields[GLOBAL_ADV],
        fields[LOCAL_WEIGHT],
        mask.bool(),
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        loss_agg_mode=actor.loss_agg_mode,
        **info,
    )
    return loss, {k: float(v) for k, v in metrics.items() if k != "pg_loss"}


def build_optimizer(model: torch.nn.Module, settings: FastSettings) -> tuple[Any, Any]:
    """verl's optimizer and learning-rate schedule for the actor's ``optim`` section."""
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup
    from verl.workers.config.optimizer import build_optimizer as verl_build_optimizer

    optim = settings.actor.optim
    optimizer = verl_build_optimizer(model.parameters(), optim)
    warmup = optim.lr_warmup_steps
    if warmup <= 0:
        warmup = int(optim.lr_warmup_steps_ratio * settings.steps)
    if optim.lr_scheduler_type == "constant":
        return optimizer, get_constant_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=warmup)
    return optimizer, get_cosine_schedule_with_warmup(
        optimizer=optimizer,
        num_warmup_steps=warmup,
        num_training_steps=settings.steps,
        min_lr_ratio=optim.min_lr_ratio,
        num_cycles=optim.num_cycles,
        zero_indexed_step=optim.zero_indexed_step,
    )


def optimizer_step(
    model: torch.nn.Module, optimizer: Any, scheduler: Any, clip_grad: float
) -> tuple[float, float]:
    """verl's ``optimizer_step`` + ``lr_scheduler_step``: returns (grad norm before clipping, lr used)."""
    lr = float(optimizer.param_groups[0]["lr"])
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip_grad)
    if torch.isfinite(grad_norm):
        optimizer.step()
    optimizer.zero_grad()
    scheduler.step()
    return float(grad_norm), lr


def train_on_batch(
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    batch: UpdateBatch,
    settings: FastSettings,
    global_step: int,
    group_size: int = 1,
) -> dict[str, float]:
    """Advantages, loss, backward and one optimizer step on ``batch``; returns the step's metrics.

    ``group_size``: rows come in groups sharing a prompt (see :func:`response_log_probs`).
    """
    fields = compute_advantages(batch, settings, global_step)
    model.train()
    log_prob = response_log_probs(model, batch, settings.temperature, group_size=group_size)
    loss, loss_metrics = policy_loss(settings, batch, log_prob, fields)
    loss.backward()
    grad_norm, lr = optimizer_step(model, optimizer, scheduler, float(settings.actor.optim.clip_grad))
    metrics = {names.ACTOR_PREFIX + k: v for k, v in loss_metrics.items()}
    metrics.update(
        {names.ACTOR_PG_LOSS: float(loss.detach()), names.ACTOR_GRAD_NORM: grad_norm, names.ACTOR_LR: lr}
    )
    metrics.update(fields["metrics"])
    metrics["_advantages"] = fields["advantages"]  # type: ignore[assignment]  # popped by the caller
    return metrics


__all__ = [
    "COPO_FIELDS",
    "UpdateBatch",
    "batch_from_groups",
    "build_optimizer",
    "compute_advantages",
    "optimizer_step",
    "policy_loss",
    "response_log_probs",
    "token_rewards",
    "train_on_batch",
]
