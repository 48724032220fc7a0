"""The COPO trainer: verl 0.9.1's v1 trainer with COPO's advantage step and loss plugged in.

verl's registered advantage estimators never see the reward function's extra info (COPO's
extracted answers) and return one tensor, and registered policy losses receive one advantage.
So the trainer overrides the advantage step: it reads the step batch from verl's TransferQueue
once, runs ``recipe.copo.step.advantage_step`` on plain tensors, and writes the per-token fields
back once. ``recipe.copo.actor_loss.copo_ppo_loss`` (installed on the actor workers with
``set_loss_fn``) reads those fields per micro-batch. Other estimators run verl's own step; the
trainer then reads that step's advantages once more to log the same ``signal/`` metrics.
"""

from __future__ import annotations

import logging
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, get_trainer_cls

from copo_core import signal_budget_metrics
from recipe.copo.actor_loss import copo_ppo_loss
from recipe.copo.step import (
    STEP_ESTIMATORS,
    StepBatch,
    StepSettings,
    advantage_step,
    answers_from_extra_info,
)
from recipe.tracking import names

log = logging.getLogger(__name__)


def _extra_info(row: Any) -> dict[str, Any]:
    """verl v1 keeps the reward's extra info per row as ``extra_fields['reward_extra_info']``."""
    return (row.get("reward_extra_info") or {}) if isinstance(row, dict) else {}


class CopoTrainerMixin:
    """Overrides of verl's v1 ``PPOTrainer`` for COPO and GCPO; mix in before a verl trainer class.

    * ``_setup``: after verl builds the workers, install COPO's loss on the actor workers.
    * ``_build_replay_buffer``: verl's, polling every ``trainer.rollout_poll_interval_s``.
    * ``_compute_advantage``: COPO/GCPO on the driver (other estimators: verl's step), plus the
      ``signal/`` metrics for every estimator.
    * ``logger``: the Tracking object is teed to ``trainer.metrics_jsonl``.
    * ``_update_actor``: with ``trainer.batch_dump_dir`` set, first saves the step batch the actor
      will train on (:func:`dump_step_batch`).
    """

    config: DictConfig
    tokenizer: Any

    def _setup(self) -> None:
        super()._setup()  # type: ignore[misc]
        loss_mode = self.config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
        if loss_mode == "copo":
            from verl.utils.config import omega_conf_to_dataclass

            actor_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
            self.actor_rollout_wg.set_loss_fn(partial(copo_ppo_loss, config=actor_config))
            log.info("installed recipe.copo.actor_loss.copo_ppo_loss on the actor workers")

    def _build_replay_buffer(self) -> Any:
        """verl's replay buffer, polling for finished rollouts every ``trainer.rollout_poll_interval_s``."""
        buffer = super()._build_replay_buffer()  # type: ignore[misc]
        interval = self.config.trainer.get("rollout_poll_interval_s")
        if interval is not None:
            if not hasattr(buffer, "poll_interval"):
                raise TypeError(
                    f"trainer.rollout_poll_interval_s is set but {type(buffer).__name__} has no poll_interval; "
                    "set it to null for a custom sampler"
                )
            buffer.poll_interval = float(interval)
        return buffer

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

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        dump_dir = self.config.trainer.get("batch_dump_dir")
        if dump_dir:
            dump_step_batch(batch, Path(str(dump_dir)), int(getattr(self, "global_steps", 0)))
        return super()._update_actor(batch, metrics)  # type: ignore[misc]

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        if str(self.config.algorithm.adv_estimator) in STEP_ESTIMATORS:
            return self._copo_step(batch, metrics)
        result = super()._compute_advantage(batch, metrics)  # type: ignore[misc]
        metrics.update(self._signal_from_store(batch))
        return result

    @cached_property
    def _step_settings(self) -> StepSettings:
        """The step's settings, read and checked once (the config is final once the trainer runs)."""
        return StepSettings.from_config(self.config)

    def _copo_step(self, batch: Any, metrics: dict) -> Any:
        """One read, :func:`advantage_step` on plain tensors, one write."""
        import transfer_queue as tq
        from tensordict import TensorDict
        from verl.workers.utils.padding import response_to_nested

        settings = self._step_settings
        select = ["uid", "response_mask", "rm_scores", "extra_fields"]
        if settings.needs_gcpo:
            select.append("responses")
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=select)
        nested_mask = data["response_mask"]
        uids = data.pop("uid").tolist()
        extra = [_extra_info(row) for row in data.pop("extra_fields").tolist()]
        padded = data.to_padded_tensor()
        is_padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        texts = None
        if settings.needs_gcpo:
            from recipe.copo.gcpo_step import decode_responses

            texts = decode_responses(padded["responses"], padded["response_mask"], self.tokenizer)
        step_batch = StepBatch(
            scores=padded["rm_scores"].float().sum(dim=-1),
            uids=uids,
            keys=batch.keys,
            is_padding=is_padding,
            response_mask=padded["response_mask"],
            preds=answers_from_extra_info(extra, is_padding) if settings.needs_answers else None,
            texts=texts,
        )
        result = advantage_step(step_batch, settings, global_step=int(getattr(self, "global_steps", 0)))
        metrics.update(result.metrics)
        output = TensorDict(
            {name: response_to_nested(value, nested_mask) for name, value in result.fields.items()},
            batch_size=len(batch),
        )
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)

    def _signal_from_store(self, batch: Any) -> dict[str, float]:
        """``signal/`` metrics of verl's own estimators (grpo, ...), read back from what their step wrote.

        The input meta's keys, partition and padding tags name the rows the step just wrote.
        """
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


def dump_step_batch(batch: Any, out_dir: Path, step: int) -> Path:
    """Save the batch the actor is about to train on as ``<out_dir>/step_<step>.pt`` (a debugging aid).

    Every field TransferQueue holds for the batch's rows (``input_ids``, ``responses``, ``old_log_probs``,
    ``advantages``, the COPO fields, ...), each as a list of per-row 1-D tensors (verl's no-padding
    layout), plus ``uid``, the reward extra info, the row keys and tags, the step and the batch's
    ``extra_info``. ``tests/e2e/test_fast_parity.py`` replays it through the fast study trainer.
    """
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id)
    record: dict[str, Any] = {
        "step": step,
        "keys": list(batch.keys),
        "tags": [dict(tag) for tag in batch.tags],
        "extra_info": dict(batch.extra_info),
    }
    for name in list(data.keys()):
        value = data.get(name)
        if name == "extra_fields":
            record["reward_extra_info"] = [_extra_info(row) for row in value.tolist()]
        elif isinstance(value, torch.Tensor):
            record[name] = [row.detach().clone() for row in value.unbind(0)]
        else:
            record[name] = value.tolist() if hasattr(value, "tolist") else value
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"step_{step}.pt"
    torch.save(record, path)
    log.info("dumped the step-%d batch to %s", step, path)
    return path


_TRAINER_CLASSES: dict[str, type] = {}


def copo_trainer_cls(trainer_mode: str) -> type[PPOTrainer]:
    """The COPO trainer for verl's ``trainer.v1.trainer_mode`` (sync, colocate_async, separate_async).

    Statistics are over each update batch: for ``sync`` (the paper's setting) that is the whole
    step; async modes with ``parameter_sync_step > 1`` update several times per step.
    """
    if trainer_mode not in _TRAINER_CLASSES:
        base = get_trainer_cls(trainer_mode)
        # CopoPPOTrainer, CopoColocateAsyncTrainer, ...: verl picks the base class per mode at run time.
        name = f"Copo{base.__name__}"
        _TRAINER_CLASSES[trainer_mode] = type(name, (CopoTrainerMixin, base), {"__module__": __name__})
    return _TRAINER_CLASSES[trainer_mode]
