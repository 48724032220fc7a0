"""A step's groups: one batch of prompts, or DAPO's dynamic sampling (``algorithm.filter_groups``).

The rule is that of verl 0.9.1's sync replay buffer (``verl/trainer/ppo/v1/replay_buffer.py``,
``ReplayBuffer.sample`` with ``filter_groups_metric``), the ``dapo_filter`` method of the study:

* a finished group whose metric (``acc`` or ``score``) has zero standard deviation over its G > 1
  responses is evicted (``_dapo_filtered_keys``);
* every evicted group adds 2 prompts of refill credit; at most ``max_inflight_gen_batches x
  train_batch_size`` prompts are in flight, and new prompts come from the data stream in order;
* once ``train_batch_size`` kept groups are available, the in-flight prompts are drained and the
  surplus kept groups are discarded (``discarded_surplus_samples``).

verl polls finished groups while others are still generating, so how many prompts are in flight at
each refill depends on timing (the v1 study saw ``dapo_filter`` runs that did not repeat). Here each
round of prompts is generated in full before the next is dispatched, which makes the rule
deterministic; which kept groups fill the batch is the first in generation order (verl sorts by the
step the prompt was dispatched at, all equal within a step, so its choice among them is arbitrary).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from recipe.study.fast.data import Prompt
from recipe.study.fast.rollout import Group


@dataclass
class StepSample:
    """The groups a step trains on and every group it generated.

    Attributes:
        kept: the step batch (``train_batch_size`` groups).
        generated: every group generated this step, kept or not, in generation order.
        evicted: groups dropped for zero variance of the metric.
        surplus: kept groups discarded because the batch was full.
        rounds: generation rounds.
    """

    kept: list[Group]
    generated: list[Group]
    evicted: list[Group] = field(default_factory=list)
    surplus: list[Group] = field(default_factory=list)
    rounds: int = 1


def is_filtered(group: Group, metric: str) -> bool:
    """verl's test: more than one response and ``np.std`` of the metric exactly 0."""
    values = group.metric(metric)
    return len(values) > 1 and float(np.std(values)) == 0.0


def sample_step(
    next_prompts: Callable[[int], Sequence[Prompt]],
    generate: Callable[[Sequence[Prompt]], list[Group]],
    batch_size: int,
    *,
    filter_groups: bool = False,
    metric: str = "acc",
    max_inflight_gen_batches: int = 1,
    max_rounds: int = 1000,
) -> StepSample:
    """The step's groups.

    Args:
        next_prompts: ``k -> the next k prompts`` of the data stream.
        generate: ``prompts -> their groups`` (rollout and reward).
        batch_size: ``data.train_batch_size``.
        filter_groups: DAPO's dynamic sampling on ``metric``.
        max_inflight_gen_batches: verl's bound on prompts in flight, in batches.
        max_rounds: give up (RuntimeError) after this many rounds without a full batch.
    """
    first = generate(next_prompts(batch_size))
    if not filter_groups:
        return StepSample(kept=first, generated=first)
    kept: list[Group] = []
    generated: list[Group] = []
    evicted: list[Group] = []
    credit = 0
    groups = first
    for rounds in range(1, max_rounds + 1):
        generated += groups
        dropped = [g for g in groups if is_filtered(g, metric)]
        evicted += dropped
        kept += [g for g in groups if not is_filtered(g, metric)]
        if len(kept) >= batch_size:
            return StepSample(
                kept=kept[:batch_size],
                generated=generated,
                evicted=evicted,
                surplus=kept[batch_size:],
                rounds=rounds,
            )
        credit += 2 * len(dropped)
        dispatch = min(credit, max_inflight_gen_batches * batch_size)
        credit -= dispatch
        if dispatch == 0:  # cannot happen with verl's 2x credit (kept + dropped cover the batch); never stall
            dispatch = batch_size - len(kept)
        groups = generate(next_prompts(dispatch))
    raise RuntimeError(
        f"DAPO filtering: fewer than {batch_size} groups with non-zero {metric} variance after {max_rounds} "
        "rounds of generation (every group all correct or all wrong)"
    )
