"""recipe.launch.spec: how a run spec writes its overrides (values, order, who wins)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipe.launch import TINY_RUN, RunSpec, format_overrides, hydra_value, parse_overrides, tiny_run


def test_values_are_written_in_hydras_grammar() -> None:
    assert hydra_value(True) == "true" and hydra_value(False) == "false"
    assert hydra_value(None) == "null"
    assert hydra_value(Path("/a/b")) == "/a/b"
    assert hydra_value(["console", "wandb"]) == "[console,wandb]"
    assert hydra_value((Path("/v"),)) == "[/v]"
    assert hydra_value(1e-05) == "1e-05" and hydra_value(-1) == "-1"
    assert hydra_value("${data.train_batch_size}") == "${data.train_batch_size}"


def test_a_nested_setting_becomes_dotted_keys_and_keeps_its_prefix() -> None:
    got = format_overrides({"++ray_kwargs.ray_init": {"num_cpus": 4, "include_dashboard": False}, "a.b": 1})
    assert got == [
        "++ray_kwargs.ray_init.num_cpus=4",
        "++ray_kwargs.ray_init.include_dashboard=false",
        "a.b=1",
    ]


def test_parse_reads_back_what_format_writes_and_the_later_key_wins() -> None:
    settings = {"a.b": 1, "c.d": [1, 2], "e": None}
    assert parse_overrides(format_overrides(settings)) == {"a.b": "1", "c.d": "[1,2]", "e": "null"}
    assert list(parse_overrides(["a=1", "b=2", "a=3"]).items()) == [("b", "2"), ("a", "3")]
    with pytest.raises(ValueError, match="not a key=value"):
        parse_overrides(["--config-name"])


def test_every_field_has_its_key_in_the_documented_order() -> None:
    spec = RunSpec(
        "copo_cpu",
        base=("base.key=0",),
        model=Path("/m"),
        rollout="hf",
        train_files=Path("/t.parquet"),
        val_files=[Path("/v.parquet")],
        seed=3,
        settings={"trainer.test_freq": 5},
        steps=7,
        method=("algorithm.copo.k=5",),
        checkpoints=Path("/o/ckpt"),
        metrics=Path("/o/metrics.jsonl"),
        extra=("trainer.test_freq=6",),
    )
    assert spec.overrides() == [
        "base.key=0",
        "actor_rollout_ref.model.path=/m",
        "actor_rollout_ref.rollout.name=hf",
        "data.train_files=/t.parquet",
        "data.val_files=[/v.parquet]",
        "data.seed=3",
        "actor_rollout_ref.rollout.seed=3",
        "trainer.test_freq=5",
        "trainer.total_training_steps=7",
        "algorithm.copo.k=5",
        "trainer.default_local_dir=/o/ckpt",
        "trainer.metrics_jsonl=/o/metrics.jsonl",
        "trainer.test_freq=6",
    ]
    assert spec.argv()[:2] == ["--config-name", "copo_cpu"] and spec.argv()[2:] == spec.overrides()
    # Hydra applies overrides in order: the user's extra wins over the spec's own setting.
    assert parse_overrides(spec.overrides())["trainer.test_freq"] == "6"


def test_an_unset_field_sets_nothing() -> None:
    assert RunSpec("copo_cpu").overrides() == []
    assert RunSpec("copo_cpu").argv() == ["--config-name", "copo_cpu"]


def test_the_tiny_run_is_one_shape_its_callers_add_to() -> None:
    spec = tiny_run(
        "copo_cpu", model="/m", train_files="/t", val_files="/v", settings={"trainer.test_freq": 2}
    )
    got = parse_overrides(spec.overrides())
    assert got["trainer.test_freq"] == "2"  # the caller's setting wins
    for key, value in TINY_RUN.items():
        if key != "trainer.test_freq":
            assert got[key] == hydra_value(value)
    assert got["data.train_batch_size"] == "4" and got["actor_rollout_ref.rollout.n"] == "4"
