"""A fast run's budget read in generated samples (``fast.budget_in_samples``; docs/STUDY_PLAN.md, "Amendment:
regime map (issue 37)", "Compute-matched DAPO, how it is read").

Off (the default) a run trains ``trainer.total_training_steps`` steps and validates every
``trainer.test_freq`` steps and after the last. On, the same two keys are read as the sample counts a
method without DAPO filtering reaches at those steps (``train_batch_size x n`` samples a step): the run
stops at the first step whose cumulative generated samples reach ``steps x train_batch_size x n``, and
validates at the first step whose cumulative generated samples reach each of the other methods'
validation counts. A method that generates a fixed batch a step therefore trains and validates exactly
as with the budget off; DAPO's filter, which generates more a step, stops after fewer updates at the
same generation. Step 0's validation (``trainer.val_before_train``) is at 0 samples either way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SampleBudget:
    """The budget in generated samples of a run of ``steps`` steps of ``per_step`` samples.

    Attributes:
        per_step: ``train_batch_size x n``, what one step of a method without filtering generates.
        steps: ``trainer.total_training_steps``.
        test_freq: ``trainer.test_freq`` (<= 0: validation only after the last step).
    """

    per_step: int
    steps: int
    test_freq: int

    @property
    def total(self) -> int:
        """The run stops at the first step whose cumulative generated samples reach this."""
        return self.steps * self.per_step

    def milestones(self) -> list[int]:
        """The cumulative sample counts at which the other methods validate after training starts."""
        steps = set(range(self.test_freq, self.steps + 1, self.test_freq)) if self.test_freq > 0 else set()
        return [step * self.per_step for step in sorted(steps | {self.steps})]

    def crossed(self, before: int, after: int) -> list[int]:
        """The milestones a step that took the cumulative count from ``before`` to ``after`` reached first
        (one validation answers them all; a DAPO step can in principle cross two)."""
        return [m for m in self.milestones() if before < m <= after]

    def exhausted(self, cumulative: int) -> bool:
        return cumulative >= self.total
