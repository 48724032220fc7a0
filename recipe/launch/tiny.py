"""The tiny run: the one workload shape of the CPU end-to-end tests, the fault harness and the GPU
preflight's trainer stage (4 prompts x 4 responses per step, two mini-batches, no validation, console
logging only), so that a run these checks start is always the same small thing."""

from __future__ import annotations

from collections.abc import Mapping

from recipe.launch.spec import RunSpec, Value

# Every tiny run: 4 prompts x 4 responses, mini-batches of 2 prompts (two optimizer updates per step,
# every group split), no validation, console logging.
TINY_RUN: Mapping[str, Value] = {
    "data.train_batch_size": 4,
    "actor_rollout_ref.rollout.n": 4,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
    "trainer.val_before_train": False,
    "trainer.test_freq": -1,
    "trainer.logger": ["console"],
}

# The CPU tests' tiny run (tests/e2e, tests/faults) adds: short prompts and responses of the tiny
# model's arithmetic data, micro-batches of 2 responses (so a mini-batch splits a group again), and
# one reward worker.
TINY_CPU: Mapping[str, Value] = {
    "data.max_prompt_length": 64,
    "data.max_response_length": 16,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 4,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 4,
    "reward.num_workers": 1,
}


def tiny_run(
    config_name: str,
    *,
    base: tuple[str, ...] = (),
    model: Value,
    train_files: Value,
    val_files: Value,
    settings: Mapping[str, Value] = {},  # noqa: B006 (read only)
    steps: int | None = None,
    rollout: str | None = None,
    checkpoints: Value = None,
    metrics: Value = None,
    extra: tuple[str, ...] = (),
) -> RunSpec:
    """A :class:`RunSpec` of :data:`TINY_RUN`'s shape; ``settings`` add to it (and win on a shared key)."""
    return RunSpec(
        config_name,
        base=base,
        model=model,
        rollout=rollout,
        train_files=train_files,
        val_files=val_files,
        settings={**TINY_RUN, **settings},
        steps=steps,
        checkpoints=checkpoints,
        metrics=metrics,
        extra=extra,
    )
