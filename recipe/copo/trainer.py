"""Driver-side COPO step: a verl v1 trainer subclass that computes every COPO quantity per step.

verl's registered advantage estimators never see the reward function's extra info (COPO's
extracted answers) and return one tensor, and registered policy losses receive one advantage.
So the trainer overrides the advantage step: on the driver, over the whole step batch (after the
reward, before any mini-batching), it computes per response the local advantage, the global
advantage of its prompt and the local-loss weight with ``copo_core``, and stores them as per-token
fields next to verl's ``advantages``. ``recipe.copo.actor_loss.copo_ppo_loss`` (installed on the
actor workers with ``set_loss_fn``) reads those fields per micro-batch.

Rows verl adds to make the batch divisible (``is_padding`` tags) get zero advantages and take no
part in the statistics. Multi-output sessions (``{uid}_{session}_{index}`` keys) are scored by
their final output, which is broadcast to the session's other outputs, as verl does for GRPO.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from verl.protocol import DataProto
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, get_trainer_cls

from copo_core import compute_copo_advantages, copo_batch_metrics, signal_budget_metrics
from recipe.copo.actor_loss import GLOBAL_ADV, LOCAL_ADV, LOCAL_WEIGHT, copo_ppo_loss
from recipe.copo.registry import COPO_DEFAULTS
from recipe.tracking import names

logger = logging.getLogger(__name__)

MISSING_PRED_MESSAGE = (
    "algorithm.copo.entropy_source=answer needs each response's extracted final answer, but the reward "
    "extra info has no 'pred' key. The reward function (reward.custom_reward_function, default "
    "pkg://recipe.reward compute_score) must return a dict such as {{'score': float, 'acc': bool, "
    "'pred': str}}; verl passes every key but 'score' to the trainer as reward extra info. Either return "
    "'pred' from your reward function or set algorithm.copo.entropy_source=reward (classes = distinct "
    "reward values). {detail}"
)

GcpoFn = Callable[[DataProto], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class CopoSettings:
    """The ``algorithm.copo`` keys plus verl's ``norm_adv_by_std_in_grpo``."""

    k: float = 5.0
    b: float = 1.0
    blend_mode: str = "soft_with_zero"
    entropy_source: str = "answer"
    entropy_penalty: bool = False
    local_estimator: str = "grpo"
    norm_adv_by_std: bool = True
    eps: float = 1e-6

    @classmethod
    def from_config(cls, config: DictConfig) -> CopoSettings:
        """Read from the full trainer config (``config.algorithm``)."""
        algorithm = config.algorithm
        copo = {**COPO_DEFAULTS, **dict(algorithm.get("copo") or {})}
        return cls(
            k=float(copo["k"]),
            b=float(copo["b"]),
            blend_mode=str(copo["blend_mode"]),
            entropy_source=str(copo["entropy_source"]),
            entropy_penalty=bool(copo["entropy_penalty"]),
            local_estimator=str(copo["local_estimator"]),
            norm_adv_by_std=bool(algorithm.get("norm_adv_by_std_in_grpo", True)),
        )


def answers_from_batch(data: DataProto, entropy_source: str) -> list[str | None] | None:
    """Extracted answers for the entropy: ``non_tensor_batch['pred']``, or None for ``reward`` classes.

    Raises:
        ValueError: ``entropy_source == 'answer'`` and the batch has no ``pred`` (see MISSING_PRED_MESSAGE).
    """
    if entropy_source == "reward":
        return None
    if "pred" not in data.non_tensor_batch:
        raise ValueError(
            MISSING_PRED_MESSAGE.format(detail=f"Extra info keys: {sorted(data.non_tensor_batch)}")
        )
    return [None if p is None else str(p) for p in data.non_tensor_batch["pred"].tolist()]


def copo_response_fields(
    data: DataProto, settings: CopoSettings, local_adv_override: torch.Tensor | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """COPO quantities of every response of ``data`` (one whole step batch, no padding rows).

    Args:
        data: ``batch['token_level_rewards']`` (N, L), ``non_tensor_batch['uid']`` (N,), and
            ``non_tensor_batch['pred']`` (N,) when ``entropy_source == 'answer'``.
        settings: the COPO keys.
        local_adv_override: (N,) local advantage to use instead of the reward GRPO one (GCPO's,
            for ``local_estimator=gcpo``); the weight and the statistics still come from copo_core.

    Returns:
        ``(fields, metrics)``: (N,) float32 tensors ``local_adv``, ``global_adv``, ``local_weight``,
        ``blended`` (``w * A^L + (1 - w) * A^G``, logged as verl's ``advantages``), and
        ``copo/<key>`` floats from ``copo_batch_metrics``.
    """
    scores = data.batch["token_level_rewards"].sum(dim=-1)
    index = data.non_tensor_batch["uid"].tolist()
    adv = compute_copo_advantages(
        scores,
        index,
        answers_from_batch(data, settings.entropy_source),
        k=settings.k,
        b=settings.b,
        blend_mode=settings.blend_mode,
        entropy_source=settings.entropy_source,
        entropy_penalty=settings.entropy_penalty,
        norm_adv_by_std=settings.norm_adv_by_std,
        eps=settings.eps,
    )
    local_adv = adv.local_adv
    if local_adv_override is not None:
        if local_adv_override.shape != local_adv.shape:
            raise ValueError(
                f"local_adv_override has shape {tuple(local_adv_override.shape)}, expected {tuple(local_adv.shape)}"
            )
        local_adv = local_adv_override.to(local_adv.device, torch.float32)
    weight = adv.local_weight
    fields = {
        "local_adv": local_adv,
        "global_adv": adv.global_adv,
        "local_weight": weight,
        "blended": weight * local_adv + (1.0 - weight) * adv.global_adv,
    }
    metrics = names.prefixed(names.COPO_PREFIX, copo_batch_metrics(adv, scores, index))
    return fields, metrics


def session_rows(batch_keys: Sequence[str], is_padding: Sequence[bool]) -> tuple[list[int], torch.Tensor]:
    """Rows that represent each session, and the map from every row to its representative.

    Keys are verl's ``{uid}_{session_id}_{index}``; the representative of a session is its output
    with the highest index (the final turn). Padding rows map to -1.

    Returns:
        ``(final_rows, row_to_final)``: row numbers of the representatives (in first-seen order) and
        an (N,) int64 tensor giving, for every row, the position of its representative in
        ``final_rows`` (-1 for padding rows).
    """
    best: dict[str, tuple[int, int]] = {}
    order: list[str] = []
    row_session: list[str | None] = []
    for row, (key, pad) in enumerate(zip(batch_keys, is_padding, strict=True)):
        if pad:
            row_session.append(None)
            continue
        parts = key.rsplit("_", 2)
        session, out_index = (f"{parts[0]}_{parts[1]}", int(parts[2])) if len(parts) == 3 else (key, 0)
        row_session.append(session)
        if session not in best:
            order.append(session)
            best[session] = (out_index, row)
        elif out_index > best[session][0]:
            best[session] = (out_index, row)
    position = {session: pos for pos, session in enumerate(order)}
    row_to_final = torch.tensor([-1 if s is None else position[s] for s in row_session], dtype=torch.int64)
    return [best[session][1] for session in order], row_to_final


def _scatter_to_tokens(
    values: torch.Tensor, row_to_final: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """(P,) per-session values -> (N, L) per-token values, zero on padding rows and padded tokens."""
    gathered = torch.zeros(row_to_final.shape[0], dtype=torch.float32)
    real = row_to_final >= 0
    gathered[real] = values.detach().float().cpu()[row_to_final[real]]
    return gathered.unsqueeze(-1) * response_mask.to(torch.float32)


def compute_step_fields(
    data: DataProto,
    batch_keys: Sequence[str],
    is_padding: Sequence[bool],
    estimator: str,
    settings: CopoSettings,
    gcpo_fn: GcpoFn | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """All per-token fields the COPO/GCPO trainer writes for one step batch.

    Args:
        data: the whole step batch as a DataProto: ``token_level_rewards`` and ``response_mask``
            (N, L), ``non_tensor_batch['uid']`` and, for ``entropy_source=answer``, ``['pred']``.
        batch_keys: verl's TransferQueue keys of the N rows (``{uid}_{session}_{index}``).
        is_padding: (N,) True for rows verl appended to make the batch divisible.
        estimator: ``copo`` or ``gcpo``.
        settings: the COPO keys.
        gcpo_fn: returns the (P,) GCPO advantage of a DataProto holding one row per session;
            required when ``estimator == 'gcpo'`` or ``settings.local_estimator == 'gcpo'``.

    Returns:
        ``(fields, metrics)``: (N, L) float32 ``advantages`` and ``returns`` (plus, for COPO,
        ``copo_local_adv``, ``copo_global_adv``, ``copo_local_weight``), and the step metrics.
    """
    final_rows, row_to_final = session_rows(batch_keys, is_padding)
    if not final_rows:
        raise ValueError("the step batch has no real (non-padding) rows")
    sub = data.select_idxs(final_rows)
    mask = data.batch["response_mask"]
    metrics: dict[str, float] = {}
    gcpo_adv = None
    if estimator == "gcpo" or settings.local_estimator == "gcpo":
        if gcpo_fn is None:
            raise ValueError("GCPO's advantage was requested but no gcpo_fn was given")
        gcpo_adv, gcpo_metrics = gcpo_fn(sub)
        metrics.update(names.prefixed(names.GCPO_PREFIX, gcpo_metrics))
    if estimator == "gcpo":
        advantages = _scatter_to_tokens(gcpo_adv, row_to_final, mask)
        return {"advantages": advantages, "returns": advantages.clone()}, metrics
    if estimator != "copo":
        raise ValueError(
            f"compute_step_fields handles algorithm.adv_estimator copo or gcpo, got {estimator!r}"
        )
    response_fields, copo_metrics = copo_response_fields(
        sub, settings, local_adv_override=gcpo_adv if settings.local_estimator == "gcpo" else None
    )
    metrics.update(copo_metrics)
    advantages = _scatter_to_tokens(response_fields["blended"], row_to_final, mask)
    fields = {
        "advantages": advantages,
        "returns": advantages.clone(),
        LOCAL_ADV: _scatter_to_tokens(response_fields["local_adv"], row_to_final, mask),
        GLOBAL_ADV: _scatter_to_tokens(response_fields["global_adv"], row_to_final, mask),
        LOCAL_WEIGHT: _scatter_to_tokens(response_fields["local_weight"], row_to_final, mask),
    }
    return fields, metrics


def reward_extra_to_non_tensor(extra_fields: Sequence[Any]) -> dict[str, np.ndarray]:
    """verl v1 stores reward extra info per row as ``extra_fields['reward_extra_info']`` (a dict);
    collect the keys present in every row as (N,) object arrays (verl's non_tensor_batch layout)."""
    infos = [(row.get("reward_extra_info") or {}) if isinstance(row, dict) else {} for row in extra_fields]
    if not infos:
        return {}
    common = set(infos[0]).intersection(*infos[1:]) if len(infos) > 1 else set(infos[0])
    out: dict[str, np.ndarray] = {}
    for key in sorted(common):
        arr = np.empty(len(infos), dtype=object)
        arr[:] = [info[key] for info in infos]
        out[key] = arr
    return out


class CopoTrainerMixin:
    """Overrides of verl's v1 ``PPOTrainer`` for COPO and GCPO; mix in before a verl trainer class.

    * ``_setup``: after verl builds the workers, install COPO's loss on the actor workers.
    * ``_compute_advantage``: COPO/GCPO fields on the driver (other estimators: verl's step),
      then ``signal/`` metrics (how many responses carry a non-zero advantage) for every estimator.
    * ``logger``: the Tracking object is teed to ``trainer.metrics_jsonl``.
    """

    config: DictConfig

    def _setup(self) -> None:
        super()._setup()  # type: ignore[misc]
        loss_mode = self.config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
        if loss_mode == "copo":
            from verl.utils.config import omega_conf_to_dataclass

            actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
            self.actor_rollout_wg.set_loss_fn(partial(copo_ppo_loss, config=actor_config))
            logger.info("installed recipe.copo.actor_loss.copo_ppo_loss on the actor workers")

    # -- metrics JSONL: verl's fit() assigns self.logger = Tracking(...); tee it on assignment --
    @property
    def logger(self) -> Any:
        return self.__dict__.get("_copo_tracking")

    @logger.setter
    def logger(self, tracking: Any) -> None:
        from recipe.tracking.jsonl import JsonlTeeTracking, metrics_jsonl_path

        path = metrics_jsonl_path(self.config)
        if path and tracking is not None and not isinstance(tracking, JsonlTeeTracking):
            tracking = JsonlTeeTracking(
                tracking, path, resume_step=int(getattr(self, "global_steps", 0) or 0)
            )
        self.__dict__["_copo_tracking"] = tracking

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        estimator = str(self.config.algorithm.adv_estimator)
        if estimator in ("copo", "gcpo"):
            result = self._compute_copo_advantage(batch, metrics, estimator)
        else:
            result = super()._compute_advantage(batch, metrics)  # type: ignore[misc]
        # Read back through the input meta: its keys, partition and padding tags name the rows the
        # step just wrote, whatever kv_batch_put returns.
        metrics.update(self._signal_budget(batch))
        return result

    def _signal_budget(self, batch: Any) -> dict[str, float]:
        """``signal/`` metrics for every estimator, so GRPO, DAPO and COPO runs compare directly."""
        import transfer_queue as tq

        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["uid", "response_mask", "rm_scores", "advantages"],
        )
        uids = np.array(data.pop("uid").tolist(), dtype=object)
        padded = data.to_padded_tensor()
        keep = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        rows = torch.tensor(keep, dtype=torch.long)
        stats = signal_budget_metrics(
            padded["advantages"][rows],
            padded["response_mask"][rows],
            padded["rm_scores"][rows].float().sum(dim=-1),
            uids[keep],
        )
        return names.prefixed(names.SIGNAL_PREFIX, stats)

    def _compute_copo_advantage(self, batch: Any, metrics: dict, estimator: str) -> Any:
        import transfer_queue as tq
        from tensordict import TensorDict
        from verl.workers.utils.padding import response_to_nested

        settings = CopoSettings.from_config(self.config)
        need_text = estimator == "gcpo" or settings.local_estimator == "gcpo"
        select = ["uid", "response_mask", "rm_scores", "extra_fields"] + (
            ["responses", "prompts"] if need_text else []
        )
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=select)
        response_mask_nested = data["response_mask"]
        uids = np.array(data.pop("uid").tolist(), dtype=object)
        extra_fields = data.pop("extra_fields").tolist()
        proto = DataProto(batch=data.to_padded_tensor())
        proto.batch["token_level_scores"] = proto.batch["rm_scores"]
        proto.batch["token_level_rewards"] = proto.batch["rm_scores"]
        proto.non_tensor_batch["uid"] = uids
        proto.non_tensor_batch.update(reward_extra_to_non_tensor(extra_fields))
        is_padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]

        gcpo_fn = None
        if need_text:
            from recipe.copo.gcpo_step import apply_gcpo

            gcpo_fn = partial(self._apply_gcpo, apply_gcpo)
        fields, step_metrics = compute_step_fields(
            proto, batch.keys, is_padding, estimator, settings, gcpo_fn
        )
        metrics.update(step_metrics)
        output = TensorDict(
            {name: response_to_nested(value, response_mask_nested) for name, value in fields.items()},
            batch_size=len(batch),
        )
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)

    def _apply_gcpo(
        self, apply_gcpo: Callable[..., Any], sub: DataProto
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return apply_gcpo(sub, self.config, self.tokenizer, global_step=int(getattr(self, "global_steps", 0)))


_TRAINER_CLASSES: dict[str, type] = {}


def copo_trainer_cls(trainer_mode: str) -> type[PPOTrainer]:
    """The COPO trainer for verl's ``trainer.v1.trainer_mode`` (sync, colocate_async, separate_async).

    Statistics are over each update batch: for ``sync`` (the paper's setting) that is the whole
    step; async modes with ``parameter_sync_step > 1`` update several times per step.
    """
    if trainer_mode not in _TRAINER_CLASSES:
        base = get_trainer_cls(trainer_mode)
        name = f"Copo{base.__name__}"
        _TRAINER_CLASSES[trainer_mode] = type(name, (CopoTrainerMixin, base), {"__module__": __name__})
    return _TRAINER_CLASSES[trainer_mode]
