"""Testbed v2's task: each task mixes difficulty levels, so every task holds solved, learnable and unsolved problems.

In testbed v1 (``recipe.study.testbed.task``) each task was one level, and a level was either mostly
solved or mostly unsolved by the SFT policy: zero-variance groups were decided by the task, so COPO's
global advantage mostly encoded which task a prompt came from. Here a task (one ``data_source``,
``testbed2/<name>``) draws its problems from several levels ``(op, m, n)`` of one operation, from
operand lengths the policy answers almost always to lengths it almost never answers. Within every
task, then, some groups are all correct, some all wrong and some mixed, and the global advantage has to
rank prompts of the same task.

The three sets are drawn from one seeded stream, in this order: validation, RL training, then the
SFT stream (which skips every problem of the first two), as in v1; problems are compared up to the
order of the operands. A problem's level is recoverable from its row (``original_id`` holds the
operands; :func:`level_of`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from data_prep.io import write_parquet_atomic
from data_prep.schema import make_row
from recipe.study.testbed.task import OPS, Level, Problem, distinct_problems, draw, draw_unique

DATA_SOURCE_PREFIX = "testbed2/"
_SYMBOL = {"add": "+", "max": "|"}


@dataclass(frozen=True)
class QuestionProblem(Problem):
    """A problem whose prompt is the question alone (19 tokens instead of 34 with the instruction).

    Tried for v2 and kept as an option (``MixedTaskSpec.instruction=False``): without the project's
    instruction after the question, 2000 SFT steps did not teach 2-digit addition (census at G=8,
    T=1: 8.9% of add2x2 answers right; v1, with the instruction, reached 94.6% in 850 steps). The
    instruction's tokens sit between the question and the answer, positions the model can compute in.
    """

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.question}]


def _as_spec(problem: Problem, instruction: bool) -> Problem:
    return problem if instruction else QuestionProblem(problem.op, problem.a, problem.b, problem.level)


@dataclass(frozen=True)
class MixedTask:
    """One task: an operation's levels and their shares.

    Attributes:
        name: the task's name; its ``data_source`` is ``testbed2/<name>``.
        levels: ``(op, m, n)`` triples of one ``op`` (an m-digit and an n-digit operand).
        weights: share of each level in the task's validation and training problems.
        sft_weights: share of each level in the task's SFT problems (default: ``weights``); easy levels
            need more examples before a small model gets them right.
    """

    name: str
    levels: tuple[Level, ...]
    weights: tuple[float, ...]
    sft_weights: tuple[float, ...] | None = None

    @property
    def sft_shares(self) -> tuple[float, ...]:
        return self.weights if self.sft_weights is None else self.sft_weights

    @property
    def data_source(self) -> str:
        return DATA_SOURCE_PREFIX + self.name

    def counts(self, total: int) -> list[int]:
        """``total`` problems split over the levels by weight (largest remainders, so they sum to ``total``)."""
        norm = sum(self.weights)
        exact = [total * w / norm for w in self.weights]
        counts = [int(x) for x in exact]
        order = sorted(range(len(exact)), key=lambda i: exact[i] - counts[i], reverse=True)
        for i in order[: total - sum(counts)]:
            counts[i] += 1
        return counts


def _default_tasks() -> tuple[MixedTask, ...]:
    return (
        MixedTask("add", (("add", 2, 2), ("add", 3, 3), ("add", 4, 4)), (1.0, 1.0, 1.0), (2.0, 1.5, 0.5)),
        MixedTask("max", (("max", 2, 2), ("max", 3, 3), ("max", 4, 4), ("max", 5, 5)), (1.0, 1.0, 1.0, 1.0)),
    )


@dataclass(frozen=True)
class MixedTaskSpec:
    """What testbed v2's problems are; part of the cache key.

    Attributes:
        tasks: the tasks (each one ``data_source``).
        sft_task_weights: share of each task in the SFT stream (within a task, its level SFT weights).
        sft_only_levels, sft_only_weights: levels only the SFT stream draws (a curriculum), on the
            same scale as ``sft_task_weights``; never validated or trained on with RL.
        train_per_task: RL training problems per task.
        val_per_task: held-out validation problems per task.
        seed: seed of the one stream that draws validation, training and SFT problems.
        instruction: prompts end with the project's instruction, as v1's (``data_prep.schema``); False:
            the question alone (:class:`QuestionProblem`).
    """

    tasks: tuple[MixedTask, ...] = _default_tasks()
    sft_task_weights: tuple[float, ...] = (1.0, 1.2)
    sft_only_levels: tuple[Level, ...] = (("add", 1, 1),)
    sft_only_weights: tuple[float, ...] = (0.4,)
    train_per_task: int = 1024
    val_per_task: int = 512
    seed: int = 0
    instruction: bool = True

    def __post_init__(self) -> None:
        names = [t.name for t in self.tasks]
        if not self.tasks or len(set(names)) != len(names):
            raise ValueError(f"MixedTaskSpec.tasks must have distinct names, got {names}")
        if len(self.sft_task_weights) != len(self.tasks) or any(w < 0 for w in self.sft_task_weights):
            raise ValueError(
                f"MixedTaskSpec.sft_task_weights needs one non-negative weight per task {names}, "
                f"got {self.sft_task_weights}"
            )
        if len(self.sft_only_weights) != len(self.sft_only_levels) or any(
            w < 0 for w in self.sft_only_weights
        ):
            raise ValueError(
                f"MixedTaskSpec.sft_only_weights needs one weight per level {self.sft_only_levels}, "
                f"got {self.sft_only_weights}"
            )
        all_levels = [level for t in self.tasks for level in t.levels]
        if len(set(all_levels)) != len(all_levels):
            raise ValueError(f"MixedTaskSpec: a level appears in two tasks: {all_levels}")
        if set(self.sft_only_levels) & set(all_levels):
            raise ValueError(
                f"MixedTaskSpec: {set(self.sft_only_levels) & set(all_levels)} is both a study and an SFT-only level"
            )
        for level in (*all_levels, *self.sft_only_levels):
            if len(level) != 3 or level[0] not in OPS or min(level[1:]) < 1:
                raise ValueError(f"MixedTaskSpec: level {level} is not (op in {OPS}, m >= 1, n >= 1)")
        for task in self.tasks:
            if len(task.weights) != len(task.levels) or any(w <= 0 for w in task.weights):
                raise ValueError(f"task {task.name}: one positive weight per level, got {task.weights}")
            if len(task.sft_shares) != len(task.levels) or any(w < 0 for w in task.sft_shares):
                raise ValueError(
                    f"task {task.name}: one non-negative SFT weight per level, got {task.sft_weights}"
                )
            if len({level[0] for level in task.levels}) != 1:
                raise ValueError(f"task {task.name}: all levels must share one op, got {task.levels}")
            per_set = zip(
                task.levels,
                task.counts(self.train_per_task),
                task.counts(self.val_per_task),
                strict=True,
            )
            for level, n_train, n_val in per_set:
                # leave at least half of the level's problems to the SFT stream
                if (n_train + n_val) * 2 > distinct_problems(level):
                    raise ValueError(
                        f"task {task.name}, level {level}: {n_train} train + {n_val} val problems are too "
                        f"many for its {distinct_problems(level)} distinct problems; lower the counts or "
                        "the level's weight"
                    )

    def source_of(self, task: MixedTask) -> str:
        """The ``data_source`` of ``task``'s rows (``testbed2/<name>``)."""
        return task.data_source

    def make_splits(self) -> MixedSplits:
        """Draw validation, then training problems, task by task and level by level."""
        rng = random.Random(self.seed)
        taken: set[tuple[str, int, int]] = set()

        def draw_split(total_per_task: int) -> list[tuple[str, Problem]]:
            out = []
            for task in self.tasks:
                for level, count in zip(task.levels, task.counts(total_per_task), strict=True):
                    out += [
                        (task.name, _as_spec(p, self.instruction))
                        for p in draw_unique(rng, level, count, taken)
                    ]
            return out

        val = draw_split(self.val_per_task)
        train = draw_split(self.train_per_task)
        rng.shuffle(train)
        return MixedSplits(self, val, train, rng, taken)


@dataclass
class MixedSplits:
    """Validation and RL training problems (each with its task's name) and the SFT stream avoiding both."""

    spec: MixedTaskSpec
    val: list[tuple[str, Problem]]
    train: list[tuple[str, Problem]]
    _rng: random.Random
    _taken: set[tuple[str, int, int]]

    def sft_stream(self) -> Iterator[Problem]:
        """Endless SFT problems: task by ``sft_task_weights``, then level by the task's SFT weights."""
        spec, rng = self.spec, self._rng
        choices: list[Level] = []
        weights: list[float] = []
        for task, task_weight in zip(spec.tasks, spec.sft_task_weights, strict=True):
            norm = sum(task.sft_shares)
            choices += list(task.levels)
            weights += [task_weight * w / norm for w in task.sft_shares]
        choices += list(spec.sft_only_levels)
        weights += list(spec.sft_only_weights)
        while True:
            level = rng.choices(choices, weights=weights)[0]
            problem = draw(rng, level)
            while problem.key in self._taken:
                problem = draw(rng, level)
            yield _as_spec(problem, spec.instruction)

    def write(self, out_dir: Path) -> tuple[Path, Path]:
        """``train.parquet`` and ``val.parquet`` in ``out_dir`` (atomic writes)."""
        train = write_parquet_atomic(
            verl_rows(self.spec, self.train, "train"), Path(out_dir) / "train.parquet"
        )
        val = write_parquet_atomic(verl_rows(self.spec, self.val, "test"), Path(out_dir) / "val.parquet")
        return train, val


def original_id(problem: Problem) -> str:
    """``"add:12+345"`` / ``"max:12|34"``: the operation and the operands in prompt order."""
    return f"{problem.op}:{problem.a}{_SYMBOL[problem.op]}{problem.b}"


def level_of(original: str) -> str:
    """The level name (``add2x3``) of a row's ``original_id``; operands sorted by length (as the level)."""
    op, operands = original.split(":", 1)
    a, b = operands.split(_SYMBOL[op])
    m, n = sorted((len(a), len(b)))
    return f"{op}{m}x{n}"


def verl_rows(spec: MixedTaskSpec, problems: Sequence[tuple[str, Problem]], split: str) -> list[dict]:
    """verl RL rows; ``data_source`` is the task (``testbed2/<name>``), ``original_id`` names the operands.

    The user message is the problem's (``boxed`` template: question and the project's instruction),
    or the question alone (``prompt_template`` then records ``question``).
    """
    source = {task.name: spec.source_of(task) for task in spec.tasks}
    rows = []
    for i, (name, p) in enumerate(problems):
        row = make_row(
            source[name],
            p.question,
            p.answer,
            split=split,
            index=i,
            original_id=original_id(p),
            template="boxed",
            content=p.messages()[0]["content"],
        )
        if isinstance(p, QuestionProblem):
            row["extra_info"]["prompt_template"] = "question"
        rows.append(row)
    return rows
