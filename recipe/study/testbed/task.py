"""The testbed's synthetic task: small arithmetic problems in difficulty levels, answered ``\\boxed{N}``.

A level ``(op, m, n)`` pairs an m-digit and an n-digit number (leading digit >= 1, in random order
when m != n) under one operation:

* ``add``: ``What is a + b?``, answer ``a + b``;
* ``max``: ``Which is larger, a or b?`` (a != b), answer the larger number.

The prompt is the question plus the project's fixed instruction (``data_prep.schema``); the policy
is taught to reply ``\\boxed{answer}``, the form the project's reward extracts first
(``recipe.reward.extract``). Each level is one ``data_source`` (``testbed/<op><m>x<n>``), so verl's
validation and the census report every level apart.

Three disjoint sets are drawn from one seeded stream, in this order: the validation problems, the
RL training problems, then the supervised fine-tuning (SFT) stream, which skips every problem of the
first two. Problems are compared up to the order of the operands, so ``b + a`` never leaks a
held-out ``a + b`` into training. Validation and training hold the same number of problems per level.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from data_prep.io import write_parquet_atomic
from data_prep.schema import BOXED_INSTRUCTION, make_row

DATA_SOURCE_PREFIX = "testbed/"
OPS = ("add", "max")
Level = tuple[str, int, int]


@dataclass(frozen=True)
class Problem:
    op: str
    a: int
    b: int
    level: Level

    @property
    def question(self) -> str:
        if self.op == "max":
            return f"Which is larger, {self.a} or {self.b}?"
        return f"What is {self.a} + {self.b}?"

    @property
    def answer(self) -> str:
        return str(max(self.a, self.b) if self.op == "max" else self.a + self.b)

    @property
    def target(self) -> str:
        """The SFT reply (the end-of-turn token is appended by the SFT code)."""
        return "\\boxed{" + self.answer + "}"

    @property
    def data_source(self) -> str:
        op, m, n = self.level
        return f"{DATA_SOURCE_PREFIX}{op}{m}x{n}"

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity of the problem up to the order of the operands."""
        return (self.op, min(self.a, self.b), max(self.a, self.b))

    def messages(self) -> list[dict[str, str]]:
        """The chat prompt verl's agent loop renders (the row's ``prompt``)."""
        return [{"role": "user", "content": self.question + "\n" + BOXED_INSTRUCTION}]


def distinct_problems(level: Level) -> int:
    """Problems of a level, counted up to the order of the operands."""
    op, m, n = level
    count_m, count_n = 9 * 10 ** (m - 1), 9 * 10 ** (n - 1)
    if m != n:
        return count_m * count_n
    pairs = count_m * (count_m + 1) // 2
    return pairs - count_m if op == "max" else pairs  # max needs a != b


@dataclass(frozen=True)
class TaskSpec:
    """What the testbed's problems are; part of the cache key.

    Attributes:
        levels: one ``(op, m, n)`` per level of the RL study (see the module docstring).
        sft_weights: share of each level in the SFT stream (same order as ``levels``).
        sft_only_levels: levels that only the SFT stream draws (a curriculum: single-digit sums
            teach the digit facts multi-digit addition is built from); never validated on.
        sft_only_weights: their shares, on the same scale as ``sft_weights``.
        train_per_level: RL training problems per level.
        val_per_level: held-out validation problems per level.
        seed: seed of the one stream that draws validation, training and SFT problems.
    """

    levels: tuple[Level, ...] = (("max", 2, 2), ("add", 2, 2), ("add", 3, 3))
    # Less 3-digit addition in SFT than in the study: it stays mostly unsolved (all-wrong groups)
    # while 2-digit problems are learned (all-correct and mixed groups).
    sft_weights: tuple[float, ...] = (1.0, 1.0, 0.5)
    sft_only_levels: tuple[Level, ...] = (("add", 1, 1),)
    sft_only_weights: tuple[float, ...] = (0.5,)
    train_per_level: int = 512
    val_per_level: int = 86
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.levels or len(set(self.levels)) != len(self.levels):
            raise ValueError(f"TaskSpec.levels must be distinct (op, m, n) triples, got {self.levels}")
        if len(self.sft_weights) != len(self.levels) or any(w < 0 for w in self.sft_weights):
            raise ValueError(
                f"TaskSpec.sft_weights needs one non-negative weight per level {self.levels}, "
                f"got {self.sft_weights}"
            )
        if len(self.sft_only_weights) != len(self.sft_only_levels) or any(
            w < 0 for w in self.sft_only_weights
        ):
            raise ValueError(
                f"TaskSpec.sft_only_weights needs one non-negative weight per level {self.sft_only_levels}, "
                f"got {self.sft_only_weights}"
            )
        if sum(self.sft_weights) + sum(self.sft_only_weights) <= 0:
            raise ValueError("TaskSpec: the SFT weights must not all be 0")
        if set(self.sft_only_levels) & set(self.levels):
            raise ValueError(
                f"TaskSpec: {set(self.sft_only_levels) & set(self.levels)} is both a study and an SFT-only level"
            )
        for level in self.sft_only_levels:
            if len(level) != 3 or level[0] not in OPS or min(level[1:]) < 1:
                raise ValueError(f"TaskSpec.sft_only_levels: {level} is not (op in {OPS}, m >= 1, n >= 1)")
        for level in self.levels:
            if len(level) != 3 or level[0] not in OPS or min(level[1:]) < 1:
                raise ValueError(f"TaskSpec.levels: {level} is not (op in {OPS}, m >= 1, n >= 1)")
            space = distinct_problems(level)
            # leave at least half of the level's problems to the SFT stream
            if (self.train_per_level + self.val_per_level) * 2 > space:
                raise ValueError(
                    f"level {level}: {self.train_per_level} train + {self.val_per_level} val problems are "
                    f"too many for its {space} distinct problems; lower them or drop the level"
                )


def _number(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def draw(rng: random.Random, level: Level) -> Problem:
    op, m, n = level
    while True:
        a, b = _number(rng, m), _number(rng, n)
        if op != "max" or a != b:
            break
    if m != n and rng.random() < 0.5:
        a, b = b, a
    return Problem(op, a, b, level)


def draw_unique(
    rng: random.Random, level: Level, count: int, taken: set[tuple[str, int, int]]
) -> list[Problem]:
    out: list[Problem] = []
    while len(out) < count:
        problem = draw(rng, level)
        if problem.key not in taken:
            taken.add(problem.key)
            out.append(problem)
    return out


@dataclass
class TaskSplits:
    """Validation and RL training problems, and the seeded SFT stream that avoids both."""

    spec: TaskSpec
    val: list[Problem]
    train: list[Problem]
    _rng: random.Random
    _taken: set[tuple[str, int, int]]

    def sft_stream(self) -> Iterator[Problem]:
        """Endless SFT problems, levels drawn by weight; never a validation or training problem."""
        rng, taken, spec = self._rng, self._taken, self.spec
        levels = spec.levels + spec.sft_only_levels
        weights = spec.sft_weights + spec.sft_only_weights
        while True:
            level = rng.choices(levels, weights=weights)[0]
            problem = draw(rng, level)
            while problem.key in taken:  # redraw within the level, so the level mix stays as weighted
                problem = draw(rng, level)
            yield problem


def make_splits(spec: TaskSpec) -> TaskSplits:
    """Draw the validation set, then the training set, level by level, from ``random.Random(spec.seed)``.

    The training set is shuffled across levels (verl's dataloader shuffles again with ``data.seed``).
    """
    rng = random.Random(spec.seed)
    taken: set[tuple[str, int, int]] = set()
    val = [p for level in spec.levels for p in draw_unique(rng, level, spec.val_per_level, taken)]
    train = [p for level in spec.levels for p in draw_unique(rng, level, spec.train_per_level, taken)]
    rng.shuffle(train)
    return TaskSplits(spec, val, train, rng, taken)


def verl_rows(problems: Sequence[Problem], split: str) -> list[dict]:
    """verl RL rows (``data_prep.schema.make_row``); ``original_id`` is e.g. ``"add:12+34"``."""
    symbol = {"add": "+", "max": "|"}
    return [
        make_row(
            p.data_source,
            p.question,
            p.answer,
            split=split,
            index=i,
            original_id=f"{p.op}:{p.a}{symbol[p.op]}{p.b}",
            template="boxed",
        )
        for i, p in enumerate(problems)
    ]


def write_data(splits: TaskSplits, out_dir: Path) -> tuple[Path, Path]:
    """``train.parquet`` and ``val.parquet`` in ``out_dir`` (atomic writes); returns their paths."""
    train = write_parquet_atomic(verl_rows(splits.train, "train"), Path(out_dir) / "train.parquet")
    val = write_parquet_atomic(verl_rows(splits.val, "test"), Path(out_dir) / "val.parquet")
    return train, val
