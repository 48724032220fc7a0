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

import contextlib
import logging
from collections.abc import Iterator, Mapping
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, open_dict, read_write
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, get_trainer_cls

from copo_core import signal_budget_metrics, wrong_answer_metrics
from recipe.copo.actor_loss import copo_ppo_loss
from recipe.copo.checkpoint_guard import CheckpointGuard, is_complete, verl_save_overrides
from recipe.copo.estimators import RECIPE_LOSS_MODES, estimator
from recipe.copo.step import (
    StepBatch,
    StepSettings,
    advantage_step,
    answers_from_extra_info,
)
from recipe.tracking import names
from recipe.tracking.jsonl import JsonlTeeTracking, metrics_jsonl_path

log = logging.getLogger(__name__)


def _extra_info(row: Any) -> dict[str, Any]:
    """verl v1 keeps the reward's extra info per row as ``extra_fields['reward_extra_info']``."""
    return (row.get("reward_extra_info") or {}) if isinstance(row, dict) else {}


@contextlib.contextmanager
def _overridden(section: DictConfig, values: Mapping[str, Any]) -> Iterator[None]:
    """``section[key] = value`` for each item while inside; the previous values (or absence) come back."""
    missing = object()
    saved = {key: section.get(key, missing) for key in values}
    with read_write(section), open_dict(section):
        for key, value in values.items():
            section[key] = value
    try:
        yield
    finally:
        with read_write(section), open_dict(section):
            for key, value in saved.items():
                if value is missing:
                    del section[key]
                else:
                    section[key] = value


class CopoTrainerMixin:
    """Overrides of verl's v1 ``PPOTrainer`` for COPO and GCPO; mix in before a verl trainer class.

    * ``_setup``: after verl builds the workers, install COPO's loss on the actor workers.
    * ``_build_replay_buffer``: verl's, polling every ``trainer.rollout_poll_interval_s``.
    * ``_compute_advantage``: COPO/GCPO on the driver (other estimators: verl's step), plus the
      ``signal/`` metrics for every estimator.
    * ``logger``: the Tracking object is teed to ``trainer.metrics_jsonl``.
    * ``_update_actor``: with ``trainer.batch_dump_dir`` set, first saves the step batch the actor
      will train on (:func:`dump_step_batch`).
    * ``_save_checkpoint`` / ``_load_checkpoint``: verl's, through :class:`CheckpointGuard` (staged,
      sealed, renamed; the tracker is published once the step's metrics line is written; resume skips
      partial folders; a full disk is a :class:`CheckpointSpaceError` naming the path and the space).
    """

    config: DictConfig
    tokenizer: Any

    def _setup(self) -> None:
        super()._setup()  # type: ignore[misc]
        loss_mode = self.config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
        if loss_mode in RECIPE_LOSS_MODES:
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

    # -- checkpoints: verl's save and load, through the guard (recipe/copo/checkpoint_guard.py) --
    @cached_property
    def _checkpoint_guard(self) -> CheckpointGuard:
        trainer = self.config.trainer
        return CheckpointGuard(trainer.default_local_dir, keep=trainer.get("max_actor_ckpt_to_keep"))

    def _load_checkpoint(self) -> Any:
        mode = self.config.trainer.resume_mode
        if mode == "auto":
            step = self._checkpoint_guard.prepare_resume()
            if step is not None:
                log.warning("resuming from %s", self._checkpoint_guard.root / f"global_step_{step}")
        elif mode == "resume_path" and not is_complete(str(self.config.trainer.resume_from_path)):
            raise ValueError(
                f"trainer.resume_from_path={self.config.trainer.resume_from_path} is not a complete checkpoint "
                "(no checkpoint_complete.json, or no data.pt and actor/): a save that never finished. Pick "
                "another global_step_N, or use trainer.resume_mode=auto for the newest complete one"
            )
        return super()._load_checkpoint()  # type: ignore[misc]

    def _save_checkpoint(self) -> None:
        guard = self._checkpoint_guard
        step = int(self.global_steps)
        guard.check_space(step)
        callback = self.checkpoint_callback
        # verl calls the user's callback with the folder it wrote; it is called after publishing instead
        self.checkpoint_callback = CheckpointCallback(config=self.config)
        try:
            staging = guard.begin(step)
            with _overridden(self.config.trainer, verl_save_overrides(staging)):
                super()._save_checkpoint()  # type: ignore[misc]
        except BaseException as exc:
            error = guard.abort(step, exc)
            if error is exc:
                raise
            raise error from exc
        finally:
            self.checkpoint_callback = callback
        guard.seal(step)
        if not isinstance(self.logger, JsonlTeeTracking):  # no metrics file to wait for
            self._publish_checkpoint()

    def _publish_checkpoint(self) -> None:
        step = self._checkpoint_guard.publish()
        if step is not None:
            folder = str(self._checkpoint_guard.root / f"global_step_{step}")
            self.checkpoint_callback.on_save(
                trainer=self, global_step=step, checkpoint_dir=folder, async_save=False
            )

    def _metrics_logged(self, step: int) -> None:
        """After the metrics line of ``step`` is written: publish the checkpoint sealed at that step."""
        pending = self._checkpoint_guard.pending
        if pending is not None and step >= pending:
            self._publish_checkpoint()

    # -- metrics JSONL: verl's fit() assigns self.logger = Tracking(...); tee it on assignment --
    @property
    def logger(self) -> Any:
        return self.__dict__.get("_copo_tracking")

    @logger.setter
    def logger(self, tracking: Any) -> None:
        path = metrics_jsonl_path(self.config)
        if path and tracking is not None and not isinstance(tracking, JsonlTeeTracking):
            tracking = JsonlTeeTracking(
                tracking,
                path,
                resume_step=int(getattr(self, "global_steps", 0) or 0),
                after_log=self._metrics_logged,
            )
        self.__dict__["_copo_tracking"] = tracking

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        dump_dir = self.config.trainer.get("batch_dump_dir")
        if dump_dir:
            dump_step_batch(batch, Path(str(dump_dir)), int(getattr(self, "global_steps", 0)))
        return super()._update_actor(batch, metrics)  # type: ignore[misc]

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        if estimator(self.config.algorithm.adv_estimator).recipe_step:
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
        """``signal/`` and ``mechanism/`` metrics of verl's own estimators (grpo, ...), read back from
        what their step wrote.

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
        step = (
            padded["advantages"][rows],
            padded["response_mask"][rows],
            padded["rm_scores"][rows].float().sum(dim=-1),
            uids[keep],
        )
        return {
            **names.prefixed(names.SIGNAL_PREFIX, signal_budget_metrics(*step)),
            **names.prefixed(names.MECHANISM_PREFIX, wrong_answer_metrics(*step)),
        }


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
