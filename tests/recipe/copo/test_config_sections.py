"""The YAML's algorithm.copo / algorithm.gcpo sections are exactly copo_core's CopoConfig / GcpoConfig:
same keys in the same order, same defaults and types, and a comment on every key."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from copo_core import CopoConfig, GcpoConfig
from recipe.copo.config_check import sections
from tests.paths import REPO
from tests.recipe.copo.copo_batches import composed_config

YAML = REPO / "recipe" / "copo" / "config" / "copo_trainer.yaml"


def _yaml_section(name: str) -> dict:
    return yaml.safe_load(YAML.read_text())["algorithm"][name]


@pytest.mark.parametrize(("name", "section"), [("copo", CopoConfig), ("gcpo", GcpoConfig)])
def test_yaml_section_equals_the_dataclass(name: str, section: type) -> None:
    in_yaml = _yaml_section(name)
    defaults = dataclasses.asdict(section())
    assert list(in_yaml) == list(defaults)  # same keys, same order
    for key, value in defaults.items():
        assert in_yaml[key] == value and type(in_yaml[key]) is type(value), f"algorithm.{name}.{key}"


@pytest.mark.parametrize("name", ["copo", "gcpo"])
def test_every_key_has_a_comment_above_it(name: str) -> None:
    lines = YAML.read_text().splitlines()
    start = lines.index(f"  {name}:")
    for key in _yaml_section(name):
        at = next(i for i in range(start, len(lines)) if lines[i].startswith(f"    {key}:"))
        assert lines[at - 1].strip().startswith("#"), f"algorithm.{name}.{key} has no comment in {YAML.name}"


def test_composed_config_builds_the_typed_sections() -> None:
    copo, gcpo = sections(composed_config("algorithm.copo.k=2", "algorithm.gcpo.embedder=hash"))
    assert copo == CopoConfig(k=2.0) and gcpo == GcpoConfig(embedder="hash")
