"""CopoConfig / GcpoConfig: defaults, type and value checks, errors that name the full key."""

from __future__ import annotations

import dataclasses
import inspect
import math

import numpy as np
import pytest

from copo_core import (
    ConfigError,
    CopoConfig,
    GcpoConfig,
    compute_copo_advantages,
    compute_gcpo_advantages,
    gcpo_advantages_from_shares,
    gcpo_shapley,
)
from copo_core.config import BLEND_MODES, MAX_EXACT_G

# SPEC sections 7 and 8 (the paper's released runs); keys added later need not be in the SPEC.
SPEC_COPO = {
    "k": 5.0,
    "b": 1.0,
    "blend_mode": "soft_with_zero",
    "entropy_source": "answer",
    "entropy_penalty": False,
    "local_estimator": "grpo",
    "wrong_answer_global": "keep",  # the paper's behaviour; "nonpositive" is this project's variant
}
SPEC_GCPO = {"alpha": 1.0, "beta": 1.0, "exact_max_g": 10, "num_permutations": 64, "seed": 0}


def test_defaults_are_the_specs() -> None:
    copo, gcpo = dataclasses.asdict(CopoConfig()), dataclasses.asdict(GcpoConfig())
    assert {key: copo[key] for key in SPEC_COPO} == SPEC_COPO
    assert {key: gcpo[key] for key in SPEC_GCPO} == SPEC_GCPO
    assert (gcpo["embedder"], gcpo["embed_batch_size"]) == ("minilm", 64)


@pytest.mark.parametrize(
    ("fn", "section"),
    [
        (compute_copo_advantages, CopoConfig),
        (gcpo_shapley, GcpoConfig),
        (compute_gcpo_advantages, GcpoConfig),
        (gcpo_advantages_from_shares, GcpoConfig),
    ],
)
def test_copo_core_function_defaults_are_the_sections(fn, section) -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(section)}
    params = inspect.signature(fn).parameters
    shared = [name for name in params if name in defaults]
    assert shared, fn.__name__
    for name in shared:
        assert params[name].default == defaults[name], (fn.__name__, name)


@pytest.mark.parametrize(
    ("section", "kwargs", "message"),
    [
        (CopoConfig, {"k": -1.0}, "algorithm.copo.k must be a finite number >= 0"),
        (CopoConfig, {"k": math.inf}, "algorithm.copo.k must be a finite number >= 0"),
        (CopoConfig, {"k": True}, "algorithm.copo.k must be a number, got True"),
        (CopoConfig, {"b": "1"}, "algorithm.copo.b must be a number"),
        (CopoConfig, {"blend_mode": "hard"}, "algorithm.copo.blend_mode must be one of soft, soft_with_zero"),
        (
            CopoConfig,
            {"entropy_source": "tokens"},
            "algorithm.copo.entropy_source must be one of answer, reward",
        ),
        (CopoConfig, {"entropy_penalty": 1}, "algorithm.copo.entropy_penalty must be true or false"),
        (
            CopoConfig,
            {"local_estimator": "ppo"},
            "algorithm.copo.local_estimator must be one of grpo, drgrpo, rloo, gcpo",
        ),
        (GcpoConfig, {"alpha": 0.0}, "algorithm.gcpo.alpha must be a finite number > 0"),
        (GcpoConfig, {"beta": math.nan}, "algorithm.gcpo.beta must be a finite number"),
        (
            GcpoConfig,
            {"exact_max_g": MAX_EXACT_G + 1},
            f"algorithm.gcpo.exact_max_g must be an integer in \\[0, {MAX_EXACT_G}\\]",
        ),
        (GcpoConfig, {"exact_max_g": 4.0}, "algorithm.gcpo.exact_max_g must be an integer, got 4.0"),
        (GcpoConfig, {"num_permutations": 0}, "algorithm.gcpo.num_permutations must be an integer >= 1"),
        (GcpoConfig, {"seed": -1}, "algorithm.gcpo.seed must be an integer >= 0"),
        (GcpoConfig, {"embedder": " "}, "algorithm.gcpo.embedder must be 'minilm', 'hash' or a local"),
        (GcpoConfig, {"embed_batch_size": 0}, "algorithm.gcpo.embed_batch_size must be an integer >= 1"),
    ],
)
def test_bad_values_name_the_key_the_rule_and_the_fix(section, kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        section(**kwargs)
    key = next(iter(kwargs))
    assert f"Fix: set {section.SECTION}.{key}=" in str(err.value)
    assert "copo_trainer.yaml" in str(err.value)
    assert isinstance(err.value, ValueError)  # callers of copo_core catch ValueError


def test_numbers_are_normalised() -> None:
    copo = CopoConfig(k=3, b=np.float32(0.5))
    assert type(copo.k) is float and copo.k == 3.0 and type(copo.b) is float and copo.b == 0.5
    assert type(GcpoConfig(seed=np.int64(7)).seed) is int


def test_from_section_rejects_unknown_and_missing_sections() -> None:
    assert CopoConfig.from_section({"k": 2, "blend_mode": "soft"}) == CopoConfig(k=2.0, blend_mode="soft")
    with pytest.raises(
        ConfigError, match=r"unknown key\(s\) algorithm\.gcpo\.aplha; the known keys are alpha"
    ):
        GcpoConfig.from_section({"aplha": 2.0})
    with pytest.raises(ConfigError, match="algorithm.copo is missing"):
        CopoConfig.from_section(None)


def test_sections_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CopoConfig().k = 1.0  # type: ignore[misc]
    assert len(BLEND_MODES) == 7
