"""Offline problem generator built on the ``reasoning-gym`` package (seeded, gold answers included).

Tasks are given as ``name`` or ``name@preset`` (``easy``/``hard``), e.g.
``chain_sum@easy,basic_arithmetic@hard``, and per-task config overrides as JSON
(``{"basic_arithmetic": {"max_digits": 2}}``; keys are the task's reasoning-gym config fields, e.g.
``min_terms``, ``max_terms``, ``min_digits``, ``max_digits``, ``allow_negation``; ``basic_arithmetic`` also
``operators``, ``allow_parentheses``). Overrides given for ``name`` apply to every preset of it, and
``name@preset`` keys override those.

Train and validation rows are drawn from one seeded stream per task spec; a problem text never appears
twice in the output, so train and val are disjoint. ``data_source`` is ``reasoning_gym/<task>`` or
``reasoning_gym/<task>@<preset>``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from data_prep.schema import REASONING_GYM_TEMPLATE, make_row

__all__ = ["PRESETS", "TaskSpec", "parse_tasks", "generate"]

# Small-and-easy vs. long-and-hard arithmetic: a small policy then gets both all-correct and
# all-wrong groups (the two cases where COPO's global term matters).
_ARITH_EASY = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
_ARITH_HARD = {"min_terms": 4, "max_terms": 6, "min_digits": 2, "max_digits": 3}
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "easy": {
        "basic_arithmetic": {
            **_ARITH_EASY,
            "operators": ["+", "-"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
        "chain_sum": {**_ARITH_EASY, "allow_negation": False},
    },
    "hard": {
        "basic_arithmetic": {**_ARITH_HARD, "operators": ["+", "-", "*"], "allow_parentheses": True},
        "chain_sum": {**_ARITH_HARD, "allow_negation": True},
    },
}
# Generation stops looking for new unique problems after this many draws per requested row.
_MAX_DRAWS_PER_ROW = 50


@dataclass(frozen=True)
class TaskSpec:
    task: str
    preset: str | None
    config: dict[str, Any]

    @property
    def label(self) -> str:
        return self.task if self.preset is None else f"{self.task}@{self.preset}"


def parse_tasks(
    tasks: str | Sequence[str], overrides: dict[str, dict[str, Any]] | None = None
) -> list[TaskSpec]:
    """``"chain_sum@easy,gsm_symbolic"`` -> TaskSpecs, validating names against reasoning-gym's registry."""
    from reasoning_gym.factory import DATASETS

    names = [t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks) if t.strip()]
    if not names:
        raise ValueError("--tasks is empty; give a comma list such as basic_arithmetic,chain_sum")
    overrides = overrides or {}
    for key in overrides:
        if key not in names and key.split("@")[0] not in {n.split("@")[0] for n in names}:
            raise ValueError(f"--task-config has key {key!r} that is not in --tasks {names}")
    specs = []
    for name in names:
        task, _, preset = name.partition("@")
        if task not in DATASETS:
            raise ValueError(
                f"unknown reasoning-gym task {task!r} in --tasks (e.g. basic_arithmetic, chain_sum, gsm_symbolic)"
            )
        config: dict[str, Any] = {}
        if preset:
            if preset not in PRESETS:
                raise ValueError(
                    f"unknown preset {preset!r} in --tasks {name!r}; use one of {sorted(PRESETS)}"
                )
            if task not in PRESETS[preset]:
                raise ValueError(
                    f"preset {preset!r} is not defined for task {task!r} (defined: {sorted(PRESETS[preset])})"
                )
            config.update(PRESETS[preset][task])
        config.update(overrides.get(task, {}))
        config.update(overrides.get(name, {}) if preset else {})
        specs.append(TaskSpec(task, preset or None, config))
    if len({s.label for s in specs}) != len(specs):
        raise ValueError(f"--tasks lists a task twice: {names}")
    return specs


def _stream_seed(seed: int, label: str) -> int:
    """A per-task seed. reasoning-gym seeds item i with ``seed + i``, so seeds S and S+1 would give
    shifted copies of one stream; hashing decorrelates different --seed values and task specs."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{label}".encode()).digest()[:4], "big")


def _split_counts(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _draw_unique(spec: TaskSpec, count: int, seed: int, seen: set[str]) -> list[tuple[str, str, str]]:
    """``count`` (question, answer, id) triples whose questions are not in ``seen`` (which is updated)."""
    import reasoning_gym

    cfg = dict(spec.config)
    for key in ("operators",):  # JSON gives lists; reasoning-gym wants tuples
        if isinstance(cfg.get(key), list):
            cfg[key] = tuple(cfg[key])
    budget = max(count * _MAX_DRAWS_PER_ROW, 100)
    dataset = reasoning_gym.create_dataset(spec.task, size=budget, seed=seed, **cfg)
    out: list[tuple[str, str, str]] = []
    for idx in range(budget):
        if len(out) == count:
            break
        item = dataset[idx]
        question, answer = str(item["question"]).strip(), str(item["answer"]).strip()
        if not question or not answer or question in seen:
            continue
        seen.add(question)
        out.append((question, answer, f"{spec.label}/seed{seed}/{idx}"))
    if len(out) < count:
        raise ValueError(
            f"reasoning-gym task {spec.label} produced only {len(out)} distinct problems, {count} requested: "
            "lower --size/--val-size or widen the task config (more terms or digits)"
        )
    return out


def generate(
    specs: Sequence[TaskSpec],
    size: int,
    seed: int,
    val_size: int = 0,
    *,
    template: str = REASONING_GYM_TEMPLATE,
) -> tuple[list[dict], list[dict]]:
    """``(train_rows, val_rows)``: ``size``/``val_size`` rows split evenly over the task specs, shuffled (seeded).

    Both files use one prompt ``template`` (``data_prep.schema.PROMPT_TEMPLATES``).
    """
    if size < 1:
        raise ValueError(f"--size must be >= 1, got {size}")
    if val_size < 0:
        raise ValueError(f"--val-size must be >= 0, got {val_size}")
    train: list[tuple[TaskSpec, tuple[str, str, str]]] = []
    val: list[tuple[TaskSpec, tuple[str, str, str]]] = []
    seen: set[str] = set()
    for spec, n_train, n_val in zip(
        specs, _split_counts(size, len(specs)), _split_counts(val_size, len(specs)), strict=True
    ):
        drawn = _draw_unique(spec, n_train + n_val, _stream_seed(seed, spec.label), seen)
        train += [(spec, d) for d in drawn[:n_train]]
        val += [(spec, d) for d in drawn[n_train:]]
    rng = random.Random(seed)
    rng.shuffle(train)
    rng.shuffle(val)

    def rows(items: list[tuple[TaskSpec, tuple[str, str, str]]], split: str) -> list[dict]:
        return [
            make_row(
                f"reasoning_gym/{spec.label}", q, a, split=split, index=j, original_id=orig, template=template
            )
            for j, (spec, (q, a, orig)) in enumerate(items)
        ]

    return rows(train, "train"), rows(val, "val")
