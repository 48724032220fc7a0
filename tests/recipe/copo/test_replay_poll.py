"""trainer.rollout_poll_interval_s reaches verl's real replay buffer (verl 0.9.1 hard-codes 2 s).

The trainer's override wraps verl's own ``_build_replay_buffer``, called here through the production
trainer class on the composed recipe config; the test times the buffer's real wait between polls, so
it fails if the setting is not applied.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from recipe.copo.trainer import CopoTrainerMixin, copo_trainer_cls
from tests.recipe.copo.copo_batches import composed_config


def _build(*overrides: str) -> Any:
    """The production trainer class's replay buffer, built from the composed recipe config.

    Only what ``_build_replay_buffer`` reads is set (config, trainer mode): verl's ``__init__``
    would start workers and Ray.
    """
    config = composed_config(*overrides)
    cls = copo_trainer_cls(config.trainer.v1.trainer_mode)
    trainer = cls.__new__(cls)
    trainer.config, trainer.trainer_mode = config, config.trainer.v1.trainer_mode
    return trainer._build_replay_buffer()


def _wait_s(buffer: ReplayBuffer) -> float:
    start = time.perf_counter()
    buffer._wait_for_next_poll("train", last_debug_time=time.time())
    return time.perf_counter() - start


def test_default_config_polls_every_tenth_of_a_second() -> None:
    buffer = _build()
    assert type(buffer) is ReplayBuffer  # verl's built-in sync buffer, built by verl
    assert buffer.poll_interval == pytest.approx(0.1)
    assert _wait_s(buffer) < 0.5


def test_null_keeps_verls_interval() -> None:
    buffer = _build("trainer.rollout_poll_interval_s=null")
    assert buffer.poll_interval == 2.0
    assert _wait_s(buffer) >= 1.9


def test_custom_sampler_without_poll_interval_fails_naming_the_key() -> None:
    class _CustomSampler:
        def _build_replay_buffer(self) -> Any:
            return object()

    class _T(CopoTrainerMixin, _CustomSampler):
        def __init__(self) -> None:
            self.config = composed_config()

    with pytest.raises(TypeError, match="rollout_poll_interval_s"):
        _T()._build_replay_buffer()
