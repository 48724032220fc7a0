"""A run of ``main_copo`` (or the fast study trainer, which takes the same overrides) as typed values.

:meth:`RunSpec.overrides` and :func:`format_overrides` are the only code that spells a Hydra
override ``key=value`` for a run (``tests/test_layering.py`` checks that no other module builds one
with an f-string). Callers say what they set (a model folder, a seed, a mapping of keys to values);
how a value is written for Hydra (``true``, ``null``, ``[a,b]``) is decided once, here.

Order: ``base`` (a run's own overrides, passed through) first, then the typed fields, ``settings``
in their order, the step budget, ``method``, the output folders and ``extra`` last. Hydra applies
overrides in order, so a key that appears twice takes the later value: the caller's own ``extra`` (a
user's command line) always wins. The study drivers fingerprint the list, so this order is part of
what a finished run is compared against (``tests/recipe/launch/test_callers.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# What a setting may hold: a scalar, a path, a list (Hydra's [a,b]) or a nested mapping (dotted keys).
Value = str | int | float | bool | None | os.PathLike | Sequence["Value"] | Mapping[str, "Value"]

CONFIG_OPTION = "--config-name"
MODEL_KEY = "actor_rollout_ref.model.path"
ROLLOUT_KEY = "actor_rollout_ref.rollout.name"
TRAIN_KEY = "data.train_files"
VAL_KEY = "data.val_files"
DATA_SEED_KEY = "data.seed"
ROLLOUT_SEED_KEY = "actor_rollout_ref.rollout.seed"
STEPS_KEY = "trainer.total_training_steps"
CHECKPOINTS_KEY = "trainer.default_local_dir"
METRICS_KEY = "trainer.metrics_jsonl"


def hydra_value(value: Value) -> str:
    """``value`` as Hydra's override grammar reads it: true/false, null, [a,b], else its text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return str(value)


def _items(key: str, value: Value) -> Iterable[tuple[str, Value]]:
    """A nested mapping as dotted keys (``++a.b`` + ``{c: 1}`` -> ``++a.b.c``)."""
    if isinstance(value, Mapping):
        for sub, v in value.items():
            yield from _items(f"{key}.{sub}", v)
    else:
        yield key, value


def format_overrides(settings: Mapping[str, Value]) -> list[str]:
    """``key=value`` for each setting, in order (a key may carry Hydra's ``+``/``++`` prefix)."""
    return [key + "=" + hydra_value(v) for k, value in settings.items() for key, v in _items(k, value)]


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """``key=value`` strings back into a mapping (the later of a repeated key wins, as in Hydra)."""
    out: dict[str, str] = {}
    for o in overrides:
        key, sep, value = o.partition("=")
        if not sep:
            raise ValueError(f"{o!r} is not a key=value override")
        out.pop(key, None)
        out[key] = value
    return out


@dataclass(frozen=True)
class RunSpec:
    """One run: the config it composes and what it overrides.

    Attributes:
        config_name: the run config under recipe/copo/config (``--config-name``).
        base: overrides passed through as given, first: the run being described (the preflight's
            ``--config-name X key=value``), which everything the spec sets then overrides.
        model: ``actor_rollout_ref.model.path``.
        rollout: ``actor_rollout_ref.rollout.name`` (``hf``, ``vllm``); None: the config's.
        train_files, val_files: ``data.train_files`` / ``data.val_files`` (a list is written ``[a,b]``).
        seed: both seeds of a run, ``data.seed`` (data order) and ``actor_rollout_ref.rollout.seed``.
        settings: any other key, in order (values as :func:`hydra_value` writes them).
        steps: ``trainer.total_training_steps``; None: the config's.
        method: a study method's overrides (recipe/study/methods.py), passed through after the budget.
        checkpoints: ``trainer.default_local_dir``. metrics: ``trainer.metrics_jsonl``.
        extra: overrides passed through as given, last (a user's command line: it wins).
    """

    config_name: str
    base: tuple[str, ...] = ()
    model: Value = None
    rollout: str | None = None
    train_files: Value = None
    val_files: Value = None
    seed: int | None = None
    settings: Mapping[str, Value] = field(default_factory=dict)
    steps: int | None = None
    method: tuple[str, ...] = ()
    checkpoints: Value = None
    metrics: Value = None
    extra: tuple[str, ...] = ()

    def overrides(self) -> list[str]:
        """The Hydra overrides of the run (after ``--config-name``), in the order the module doc gives."""
        head: dict[str, Value] = {}
        if self.model is not None:
            head[MODEL_KEY] = self.model
        if self.rollout is not None:
            head[ROLLOUT_KEY] = self.rollout
        if self.train_files is not None:
            head[TRAIN_KEY] = self.train_files
        if self.val_files is not None:
            head[VAL_KEY] = self.val_files
        if self.seed is not None:
            head[DATA_SEED_KEY] = self.seed
            head[ROLLOUT_SEED_KEY] = self.seed
        budget = {STEPS_KEY: self.steps} if self.steps is not None else {}
        outputs: dict[str, Value] = {}
        if self.checkpoints is not None:
            outputs[CHECKPOINTS_KEY] = self.checkpoints
        if self.metrics is not None:
            outputs[METRICS_KEY] = self.metrics
        return [
            *self.base,
            *format_overrides(head),
            *format_overrides(self.settings),
            *format_overrides(budget),
            *self.method,
            *format_overrides(outputs),
            *self.extra,
        ]

    def argv(self) -> list[str]:
        """``--config-name NAME`` and the overrides: the trainer's arguments."""
        return [CONFIG_OPTION, self.config_name, *self.overrides()]
