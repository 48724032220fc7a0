"""trainer.rollout_poll_interval_s reaches verl's real replay buffer (verl 0.9.1 hard-codes 2 s).

The trainer's override wraps verl's own ``_build_replay_buffer``; the test times the buffer's real
wait between polls, so it fails if the setting is not applied.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from recipe.copo.trainer import CopoTrainerMixin
from tests.paths import REPO


class _VerlBuild:
    """Stands in for verl's PPOTrainer: builds the built-in sync ReplayBuffer as verl does."""

    def _build_replay_buffer(self) -> Any:
        sampler = OmegaConf.create({"max_off_policy_threshold": 8, "max_off_policy_strategy": "drop"})
        return ReplayBuffer(
            trainer_mode="sync",
            trainer_config=OmegaConf.create({}),
            max_off_policy_threshold=sampler.max_off_policy_threshold,
            max_off_policy_strategy=sampler.max_off_policy_strategy,
            sampler_kwargs=OmegaConf.create({}),
        )


class _Trainer(CopoTrainerMixin, _VerlBuild):
    def __init__(self, trainer_section: dict[str, Any]) -> None:
        self.config = OmegaConf.create({"trainer": trainer_section})


def _wait_s(buffer: ReplayBuffer) -> float:
    start = time.perf_counter()
    buffer._wait_for_next_poll("train", last_debug_time=time.time())
    return time.perf_counter() - start


def test_default_config_polls_every_tenth_of_a_second() -> None:
    default = OmegaConf.load(REPO / "recipe/copo/config/copo_trainer.yaml").trainer.rollout_poll_interval_s
    buffer = _Trainer({"rollout_poll_interval_s": default})._build_replay_buffer()
    assert buffer.poll_interval == pytest.approx(0.1)
    assert _wait_s(buffer) < 0.5


def test_null_keeps_verls_interval() -> None:
    buffer = _Trainer({"rollout_poll_interval_s": None})._build_replay_buffer()
    assert buffer.poll_interval == 2.0
    assert _wait_s(buffer) >= 1.9


def test_custom_sampler_without_poll_interval_fails_naming_the_key() -> None:
    class _CustomSampler:
        def _build_replay_buffer(self) -> Any:
            return object()

    class _T(CopoTrainerMixin, _CustomSampler):
        def __init__(self) -> None:
            self.config = OmegaConf.create({"trainer": {"rollout_poll_interval_s": 0.1}})

    with pytest.raises(TypeError, match="rollout_poll_interval_s"):
        _T()._build_replay_buffer()
