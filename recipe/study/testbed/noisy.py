"""Testbed v3's task: v2's mixed-difficulty tasks, with the SFT answers of some levels corrupted.

RL on language models mostly *sharpens*: it moves probability onto answers the policy already ranks
first, raising its accuracy at the sampling temperature toward its greedy accuracy. The v2 SFT policy
was roughly calibrated (what it did not sample it did not know either), so GRPO had little to sharpen
and a 1M-parameter model could not learn new arithmetic from a few hundred sampled answers
(docs/STUDY_CPU.md, testbed v2). v3's policy *knows* answers it often does not *sample*: on its
learnable levels a share of the SFT targets has one digit replaced (:func:`corrupt`), drawn afresh for
every SFT example from the build's seeded stream. The fine-tuned policy's most likely answer is then
the right one, while at temperature 1 it reproduces the corruption rate: the gap between its greedy
and its sampled accuracy is the headroom RL can take.

Each task keeps, beside its learnable levels, a level the policy mostly answers (clean targets:
all-correct groups) and one it cannot compute (long operands left out of the stream: all-wrong groups
that stay all-wrong), so zero-variance groups of both kinds occur within every task throughout
training. Validation and training problems (the RL reward) always carry the true answer.

**Held out from every SFT.** v3 continues testbed v2's SFT policy (``recipe.study.testbed.build.
ContinuedSpec``), so its RL problems must be unseen by v2's stream and by v3's. The spec keeps v2's
tasks, seed and counts, so it draws v2's validation and training problems (the *pool*) first and its
stream skips them, as v2's did; ``rl_levels`` then re-splits the pool's problems of the chosen levels
into v3's validation and training sets (seeded; the pool's other levels are used by neither).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from recipe.study.testbed.mixed import MixedSplits, MixedTask, MixedTaskSpec
from recipe.study.testbed.task import Level, Problem

DATA_SOURCE_PREFIX = "testbed3/"


@dataclass(frozen=True)
class ShownProblem(Problem):
    """An SFT example whose target shows ``shown`` instead of the true answer (``answer`` stays true)."""

    shown: str = ""

    @property
    def target(self) -> str:
        return "\\boxed{" + self.shown + "}"


def corrupt(answer: str, rng: random.Random) -> str:
    """``answer`` with one digit, at a uniformly drawn position, replaced by another digit.

    The leading digit of a multi-digit answer is replaced by a non-zero digit, so the result is still a
    number of the same length and never the true answer.
    """
    if not answer.isdigit():
        raise ValueError(f"corrupt: {answer!r} is not a non-negative integer")
    pos = rng.randrange(len(answer))
    low = 1 if pos == 0 and len(answer) > 1 else 0
    choices = [str(d) for d in range(low, 10) if str(d) != answer[pos]]
    return answer[:pos] + rng.choice(choices) + answer[pos + 1 :]


@dataclass(frozen=True)
class NoisyTaskSpec(MixedTaskSpec):
    """:class:`MixedTaskSpec` plus a corruption rate per level of the SFT stream; part of the cache key.

    Attributes:
        sft_noise: ``(level, rate)`` pairs: that share of the level's SFT examples shows a corrupted
            answer (:func:`corrupt`). Levels not listed are clean.
        rl_levels: ``(level, validation count)`` pairs: the pool's problems of these levels, re-split
            into that many validation problems and the rest training; empty: the pool as drawn.
    """

    sft_noise: tuple[tuple[Level, float], ...] = ()
    rl_levels: tuple[tuple[Level, int], ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.instruction:
            raise ValueError(
                "NoisyTaskSpec: instruction=False is not supported (corrupted targets keep the instruction)"
            )
        levels = {level for task in self.tasks for level in task.levels} | set(self.sft_only_levels)
        for level, rate in self.sft_noise:
            if tuple(level) not in levels:
                raise ValueError(
                    f"NoisyTaskSpec.sft_noise: {level} is not a level of the spec {sorted(levels)}"
                )
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"NoisyTaskSpec.sft_noise: rate {rate} of {level} must be in [0, 1)")
        study = {tuple(level) for task in self.tasks for level in task.levels}
        for level, n_val in self.rl_levels:
            if tuple(level) not in study:
                raise ValueError(f"NoisyTaskSpec.rl_levels: {level} is not a validated level {sorted(study)}")
            task = next(t for t in self.tasks if tuple(level) in map(tuple, t.levels))
            i = [tuple(lv) for lv in task.levels].index(tuple(level))
            pool = task.counts(self.val_per_task)[i] + task.counts(self.train_per_task)[i]
            if not 0 < n_val < pool:
                raise ValueError(
                    f"NoisyTaskSpec.rl_levels: {n_val} validation problems of {level} must leave some of its "
                    f"{pool} pool problems to training"
                )

    def source_of(self, task: MixedTask) -> str:
        return DATA_SOURCE_PREFIX + task.name

    def noise_of(self, level: Level) -> float:
        return dict((tuple(lv), r) for lv, r in self.sft_noise).get(tuple(level), 0.0)

    def make_splits(self) -> NoisySplits:
        """The pool as :class:`MixedTaskSpec` draws it, re-split by ``rl_levels``; the stream skips the whole pool."""
        s = super().make_splits()
        val, train = s.val, s.train
        if self.rl_levels:
            val, train = resplit(s.val + s.train, self.rl_levels, self.seed)
        return NoisySplits(s.spec, val, train, s._rng, s._taken)


def resplit(
    pool: list[tuple[str, Problem]], rl_levels: tuple[tuple[Level, int], ...], seed: int
) -> tuple[list[tuple[str, Problem]], list[tuple[str, Problem]]]:
    """Per level of ``rl_levels`` (in order): the pool's problems shuffled, the first ``count`` to validation.

    A separate stream (``seed``), so the SFT stream's random numbers do not depend on the re-split.
    """
    rng = random.Random(f"resplit-{seed}")
    val: list[tuple[str, Problem]] = []
    train: list[tuple[str, Problem]] = []
    for level, count in rl_levels:
        mine = sorted((item for item in pool if item[1].level == tuple(level)), key=lambda item: item[1].key)
        rng.shuffle(mine)
        val += mine[:count]
        train += mine[count:]
    rng.shuffle(train)
    return val, train


class NoisySplits(MixedSplits):
    """:class:`MixedSplits` whose SFT stream corrupts answers at each level's rate (same seeded stream)."""

    spec: NoisyTaskSpec

    def sft_stream(self) -> Iterator[Problem]:
        rng = self._rng
        for problem in super().sft_stream():
            rate = self.spec.noise_of(problem.level)
            if rate > 0 and rng.random() < rate:
                yield ShownProblem(
                    problem.op, problem.a, problem.b, problem.level, corrupt(problem.answer, rng)
                )
            else:
                yield problem
