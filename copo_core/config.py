"""The ``algorithm.copo`` and ``algorithm.gcpo`` config sections: every key's default and check, once.

Pure Python (no torch). The YAML (``recipe/copo/config/copo_trainer.yaml``) declares the same keys
with a comment each, and a test keeps the two equal. copo_core's function defaults read these
classes, and the recipe builds them from the composed config with :meth:`from_section`, so a value
is checked the same way whether it comes from the command line or from a direct call.

Adding a key: one line here (name, type, default, rule) and the commented line in the YAML.

Usage::

    copo = CopoConfig.from_section(config.algorithm.copo)   # raises ConfigError naming the key
    CopoConfig(k=-1.0)                                       # ConfigError: algorithm.copo.k must be ...
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, get_type_hints

__all__ = [
    "BLEND_MODES",
    "ENTROPY_SOURCES",
    "LOCAL_ESTIMATORS",
    "MAX_EXACT_G",
    "WRONG_ANSWER_GLOBAL",
    "ConfigError",
    "CopoConfig",
    "GcpoConfig",
]

# Weight of the LOCAL loss per mode (SPEC section 4).
BLEND_MODES: tuple[str, ...] = (
    "soft",
    "soft_with_zero",
    "soft_with_forced",
    "zero",
    "forced",
    "global_only",
    "local_only",
)
ENTROPY_SOURCES: tuple[str, ...] = ("answer", "reward")
# COPO's local term (SPEC section 1); each name's maths is its row in copo_core.advantages.LOCAL_ADVANTAGES.
LOCAL_ESTIMATORS: tuple[str, ...] = ("grpo", "drgrpo", "rloo", "gcpo")
# A wrong answer's global advantage (SPEC section 4a): `keep` (the paper) or `nonpositive` (this project's
# variant, not the paper's: min(A^G, 0) for a response with reward 0).
WRONG_ANSWER_GLOBAL: tuple[str, ...] = ("keep", "nonpositive")
# Exact Shapley values cost about G * 2^G floats per group; beyond G = 20 only Monte Carlo is usable.
MAX_EXACT_G = 20

YAML_FILE = "recipe/copo/config/copo_trainer.yaml"


class ConfigError(ValueError):
    """A bad COPO/GCPO setting; the message names the full key, what is wrong and how to fix it."""


def _key(default: Any, rule: str, check: Callable[[Any], bool] = lambda _: True) -> Any:
    """A config field: its default, the rule in words (for the error) and the check."""
    return dataclasses.field(default=default, metadata={"rule": rule, "check": check})


def _finite(value: float) -> bool:
    return math.isfinite(value)


def _one_of(choices: tuple[str, ...]) -> tuple[str, Callable[[Any], bool]]:
    return f"one of {', '.join(choices)}", lambda value: value in choices


_TYPE_RULES: dict[type, tuple[str, Callable[[Any], bool]]] = {
    float: ("a number", lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool)),
    bool: ("true or false", lambda v: isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
}

_Section = TypeVar("_Section", bound="_ConfigSection")


@dataclasses.dataclass(frozen=True)
class _ConfigSection:
    """Type and value checks for every field (from its annotation and ``_key`` metadata)."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kind = hints[field.name]
            type_rule, type_ok = _TYPE_RULES[kind]
            if not type_ok(value):
                self._fail(field, value, type_rule)
            if kind in (float, int):
                value = kind(value)  # YAML's 5 for a float key, numpy scalars from callers
                object.__setattr__(self, field.name, value)
            if not field.metadata["check"](value):
                self._fail(field, value, field.metadata["rule"])

    def _fail(self, field: dataclasses.Field, value: Any, rule: str) -> None:
        key = f"{self.SECTION}.{field.name}"
        raise ConfigError(
            f"{key} must be {rule}, got {value!r}. Fix: set {key}=<value> on the command line or in the "
            f"run's YAML (default {json.dumps(field.default)}; every key is explained in {YAML_FILE})."
        )

    @classmethod
    def from_section(cls: type[_Section], section: Mapping[str, Any] | None) -> _Section:
        """Build from the composed config's section (a DictConfig or dict); unknown keys raise."""
        if section is None:
            raise ConfigError(f"{cls.SECTION} is missing; compose the run's config from {YAML_FILE}")
        known = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(section) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(f'{cls.SECTION}.{key}' for key in unknown)}; the known keys are "
                f"{', '.join(known)}. Fix the spelling (every key is explained in {YAML_FILE})."
            )
        return cls(**{key: section[key] for key in section})


@dataclasses.dataclass(frozen=True)
class CopoConfig(_ConfigSection):
    """``algorithm.copo`` (SPEC section 7)."""

    SECTION: ClassVar[str] = "algorithm.copo"

    k: float = _key(5.0, "a finite number >= 0 (gate sharpness)", lambda v: _finite(v) and v >= 0)
    b: float = _key(1.0, "a finite number (gate threshold, bits)", _finite)
    blend_mode: str = _key("soft_with_zero", *_one_of(BLEND_MODES))
    entropy_source: str = _key("answer", *_one_of(ENTROPY_SOURCES))
    entropy_penalty: bool = _key(False, "true or false")
    local_estimator: str = _key("grpo", *_one_of(LOCAL_ESTIMATORS))
    wrong_answer_global: str = _key("keep", *_one_of(WRONG_ANSWER_GLOBAL))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.wrong_answer_global != "keep" and self.blend_mode == "local_only":
            key = f"{self.SECTION}.wrong_answer_global"
            raise ConfigError(
                f"{key}={self.wrong_answer_global} (this project's variant: a wrong answer's global advantage "
                f"capped at 0) means nothing with {self.SECTION}.blend_mode=local_only, which gives the global "
                f"term no weight. Fix: set {key}=keep, or a blend mode with a global term (e.g. soft_with_zero)."
            )


@dataclasses.dataclass(frozen=True)
class GcpoConfig(_ConfigSection):
    """``algorithm.gcpo`` (SPEC section 8)."""

    SECTION: ClassVar[str] = "algorithm.gcpo"

    alpha: float = _key(1.0, "a finite number > 0", lambda v: _finite(v) and v > 0)
    beta: float = _key(1.0, "a finite number", _finite)
    exact_max_g: int = _key(10, f"an integer in [0, {MAX_EXACT_G}]", lambda v: 0 <= v <= MAX_EXACT_G)
    num_permutations: int = _key(64, "an integer >= 1", lambda v: v >= 1)
    seed: int = _key(0, "an integer >= 0", lambda v: v >= 0)
    embedder: str = _key(
        "minilm", "'minilm', 'hash' or a local sentence-transformers model folder", lambda v: bool(v.strip())
    )
    embed_batch_size: int = _key(64, "an integer >= 1", lambda v: v >= 1)
