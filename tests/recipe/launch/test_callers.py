"""Every caller of recipe.launch builds the overrides it built before (tests/recipe/launch/before.py).

Where the list is a study run's fingerprint (a finished run with another one is rerun) the order is
part of the behaviour and must match exactly; elsewhere no key repeats, so the composed config is
the same when the key-value pairs and the last override (the user's, which must still win) are."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from recipe.launch import parse_overrides
from tests.recipe.launch import before

ROOT = Path("/X")


def _same_run(now: list[str], then: list[str], user_last: str | None = None) -> None:
    """The same overrides (each once, the same values); the user's override, if any, still last."""
    assert sorted(now) == sorted(then)
    pairs = [o for o in then if "=" in o]
    assert len(parse_overrides(pairs)) == len(pairs)  # no key repeats, so the order sets no value
    if user_last is not None:
        assert now[-1] == then[-1] == user_last


def _under(values: Any, root: Path) -> Any:
    """``values`` (recorded under /X) with ``root`` in place of /X."""
    if isinstance(values, str):
        return values.replace(str(ROOT), str(root))
    return [_under(v, root) for v in values]


def test_e2e_tiny_run() -> None:
    from tests.e2e.cpu_run import tiny_recipe_spec

    spec = tiny_recipe_spec(ROOT / "e2e/tiny", ROOT / "e2e/train.parquet", ROOT / "e2e/val.parquet",
                            ROOT / "e2e/ckpt", steps=3)  # fmt: skip
    now = spec.argv()
    assert now[:2] == before.E2E[:2]
    _same_run(now, before.E2E)


def test_fault_harness_tiny_run(tmp_path: Path) -> None:
    from tests.faults.harness import tiny_run

    run = tiny_run(tmp_path / "f", (tmp_path / "m", tmp_path / "t", tmp_path / "v"), extra=("a.b=1",))
    now = run.command(5, "x.y=2")[1:]
    then = _under(before.FAULTS, tmp_path)
    _same_run(now, then, user_last="x.y=2")
    # the harness's extras come after its own settings, the command's after those
    assert now.index("a.b=1") > now.index(f"trainer.default_local_dir={tmp_path / 'f' / 'ckpt'}")


@pytest.mark.parametrize(
    ("device", "rollout", "tiny", "recorded"),
    [("cpu", "hf", True, "PREFLIGHT_CPU_HF_TINY"), ("cuda", "vllm", False, "PREFLIGHT_CUDA_VLLM")],
)
def test_preflight_trainer_stage(
    device: str, rollout: str, tiny: bool, recorded: str, tmp_path: Path
) -> None:
    from recipe.preflight.trainer_run import run_spec

    spec = run_spec("copo_qwen2.5_3b", tmp_path / "model", tmp_path / "w", device, rollout, tiny,
                    base=("trainer.nnodes=2",))  # fmt: skip
    now = spec.overrides()
    assert now[0] == "trainer.nnodes=2"  # the run's own overrides first: the preflight's shrink wins
    assert parse_overrides(now)["trainer.nnodes"] == "1"
    then = _under(getattr(before, recorded), tmp_path)
    assert sorted(now[1:]) == sorted(then)


@pytest.mark.parametrize(
    ("argv", "recorded"),
    [
        (["--model", "/m", "--data", "/d", "--out", "/o"], "QUICKSTART_DEFAULT"),
        (
            ["--model", "/m", "--data", "/d", "--out", "/o", "--steps", "3", "--algo", "grpo", "--batch", "8",
             "--mini-batch", "0", "--n", "2", "--lr", "2e-5", "--seed", "4", "--prompt-length", "10",
             "--response-length", "20", "a.b=3"],
            "QUICKSTART_OPTIONS",
        ),
    ],
)  # fmt: skip
def test_quickstart(argv: list[str], recorded: str) -> None:
    from recipe.quickstart import run as qs

    args, extra = qs.parse_args(argv)
    now = qs.trainer_command(args, extra)[1:]
    then = getattr(before, recorded)
    assert now[:4] == then[:4]  # -m recipe.copo.main_copo --config-name
    _same_run(now, then, user_last=extra[-1] if extra else None)


def _testbed() -> Any:
    from recipe.study.testbed.build import Testbed

    return Testbed(ROOT / "tb", "key")


def test_study_jobs_keep_their_fingerprinted_order() -> None:
    from recipe.study.common import jobs

    plan = [("grpo", 1, 1e-4), ("copo_soft", 2, 3e-4), ("dapo_filter", 3, 1e-3)]
    fast = jobs.fast_jobs(_testbed(), plan, ROOT / "runs", python="py")
    assert [j.command[1:] for j in fast] == before.STUDY_FAST
    assert [j.fingerprint["overrides"] for j in fast] == [c[5:] for c in before.STUDY_FAST]
    real = jobs.real_jobs(
        _testbed(), plan, ROOT / "runs", steps=7, extra=["trainer.test_freq=5"], python="py"
    )
    assert [j.command[1:] for j in real] == before.STUDY_REAL


def test_testbed_v1_runs() -> None:
    from recipe.study.testbed import runs

    made = runs.make_jobs(_testbed(), ["grpo", "copo_soft"], [1, 2], ROOT / "runs", steps=7, python="py")
    for job, then in zip(made, before.STUDY_V1, strict=True):
        assert job.command[1:5] == then[:4]
        _same_run(job.command[1:], then)


def test_exploration_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe.study.testbed2 import exploration

    monkeypatch.setattr(
        exploration,
        "prepare_data",
        lambda tb, kind, d: (d / kind / "train.parquet", d / kind / "val.parquet"),
    )
    made = exploration.probe_jobs(
        _testbed(), exploration.PROBES[:3], ROOT / "runs", ROOT / "data", python="py"
    )
    assert [j.command[1:] for j in made] == before.PROBES


def test_smollm2_commands() -> None:
    from recipe.study import smollm2

    args = argparse.Namespace(test_freq=4, save_freq=8, model=ROOT / "m", data=ROOT / "d", steps=9, lr=1e-5,
                              prompt_length=100, batch=4, methods=["grpo", "copo_soft"])  # fmt: skip
    assert [smollm2.run_command(args, m, 0, ROOT / "o")[1:] for m in args.methods] == before.SMOLLM2_COMMANDS


def _composed(argv: list[str], config_name: str = "copo_cpu") -> dict:
    """The config ``argv`` (``[--config-name NAME] overrides``) composes to, unresolved."""
    from omegaconf import OmegaConf

    from recipe.copo.config_check import compose

    if argv[0] == "--config-name":
        config_name, argv = argv[1], argv[2:]
    return OmegaConf.to_container(compose(list(argv), config_name=config_name), resolve=False)


def test_the_composed_configs_are_the_ones_the_recorded_overrides_compose(tmp_path: Path) -> None:
    """Beyond the strings: Hydra builds the same config from the overrides before and now."""
    from recipe.preflight.trainer_run import run_spec
    from recipe.quickstart import run as qs
    from tests.e2e.cpu_run import tiny_recipe_spec

    e2e = tiny_recipe_spec(ROOT / "e2e/tiny", ROOT / "e2e/train.parquet", ROOT / "e2e/val.parquet",
                           ROOT / "e2e/ckpt", steps=3)  # fmt: skip
    assert _composed(e2e.argv()) == _composed(before.E2E)
    preflight = run_spec("copo_cpu", tmp_path / "model", tmp_path / "w", "cpu", "hf", True)
    assert _composed(preflight.overrides()) == _composed(_under(before.PREFLIGHT_CPU_HF_TINY, tmp_path))
    args, _ = qs.parse_args(["--model", "/m", "--data", "/d", "--out", "/o"])
    assert _composed(qs.build_overrides(args, [])) == _composed(before.QUICKSTART_DEFAULT[2:])
