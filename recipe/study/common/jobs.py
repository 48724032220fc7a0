"""The study's runs as driver jobs (``recipe.study.driver``): fast runs and real-trainer runs.

Both trainers take the same Hydra overrides after ``--config-name testbed2_cpu``: the testbed's paths,
the seed (data order and rollout sampling), the learning rate and the method's overrides
(``recipe.study.methods``). A fast run is ``python -m recipe.study.fast.run OUT --config-name ...``;
a real one ``python -m recipe.copo.main_copo --config-name ...``. Plans are interleaved, for each
seed every method, so that drift in the machine's speed hits all methods alike.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

from recipe import launch
from recipe.files import REPO_ROOT
from recipe.launch import RunSpec
from recipe.study.driver import METRICS, Job
from recipe.study.methods import METHODS
from recipe.study.testbed.build import Testbed
from recipe.study.testbed.runs import run_env

# The testbed studies' workload (testbed v2's plan names it); a derived one (testbed3_cpu) builds on it.
CONFIG_NAME = "testbed2_cpu"
USAGE = "usage.json"  # real runs: CPU seconds (recipe.study.common.usage)
CONFIG_PATH = REPO_ROOT / "recipe" / "copo" / "config" / f"{CONFIG_NAME}.yaml"
FAST_MODULE = "recipe.study.fast.run"  # the fast trainer's command line: OUT, then main_copo's arguments
# Bump when the fast trainer changes what a run computes: finished runs then count as stale.
FAST_TRAINER_VERSION = 1
# The fast trainer's budget in generated samples (recipe/study/fast/budget.py), this project's key: a
# plan's ``sample_matched`` methods run with it, so DAPO's filter is compute-matched.
SAMPLE_BUDGET_OVERRIDE = "+fast.budget_in_samples=true"


def run_name(method: str, seed: int, lr: float | None = None) -> str:
    """``grpo-s3``, or ``grpo-lr0.001-s1000`` for a tuning run."""
    return f"{method}-s{seed}" if lr is None else f"{method}-lr{lr:g}-s{seed}"


def config_path(config_name: str = CONFIG_NAME) -> Path:
    return REPO_ROOT / "recipe" / "copo" / "config" / f"{config_name}.yaml"


def workload_sha256(config_name: str = CONFIG_NAME) -> str:
    """Hash of the workload yaml's values (comments and layout do not count); a derived workload
    (testbed3_cpu) hashes its own file and the one it builds on."""
    from omegaconf import OmegaConf

    text = OmegaConf.to_yaml(OmegaConf.load(config_path(config_name)), sort_keys=True)
    if config_name != CONFIG_NAME:
        text += OmegaConf.to_yaml(OmegaConf.load(CONFIG_PATH), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def run_spec(
    testbed: Testbed,
    method: str,
    seed: int,
    lr: float,
    steps: int | None = None,
    config_name: str = CONFIG_NAME,
    *,
    checkpoints: Path | None = None,
    metrics: Path | None = None,
    extra: Sequence[str] = (),
) -> RunSpec:
    """One run (either trainer): the testbed's paths, the seed, the learning rate, the method; a real
    run adds its output folders and ``extra`` overrides."""
    return RunSpec(
        config_name,
        model=testbed.model,
        train_files=testbed.data / "train.parquet",
        val_files=testbed.data / "val.parquet",
        seed=seed,
        settings={"actor_rollout_ref.actor.optim.lr": lr, "trainer.experiment_name": f"{method}-s{seed}"},
        steps=steps,
        method=tuple(METHODS[method]),
        checkpoints=checkpoints,
        metrics=metrics,
        extra=tuple(extra),
    )


def overrides(testbed: Testbed, method: str, seed: int, lr: float, steps: int | None = None) -> list[str]:
    """Hydra overrides of one run, after ``--config-name testbed2_cpu`` (either trainer)."""
    return run_spec(testbed, method, seed, lr, steps).overrides()


def planned_steps(steps: int | None, config_name: str = CONFIG_NAME) -> int:
    from omegaconf import OmegaConf

    return int(
        steps if steps is not None else OmegaConf.load(config_path(config_name)).trainer.total_training_steps
    )


def fast_jobs(
    testbed: Testbed,
    plan: Sequence[tuple[str, int, float]],
    runs_dir: Path,
    *,
    name_lr: bool = False,
    steps: int | None = None,
    python: str = sys.executable,
    config_name: str = CONFIG_NAME,
    sample_matched: Sequence[str] = (),
) -> list[Job]:
    """One fast run per ``(method, seed, lr)`` of ``plan``, in order; the ``sample_matched`` methods'
    runs are budgeted in generated samples (they finish at the samples, not the steps)."""
    budget = planned_steps(steps, config_name)
    sha = workload_sha256(config_name)
    jobs = []
    for method, seed, lr in plan:
        name = run_name(method, seed, lr if name_lr else None)
        out = runs_dir / name
        matched = method in sample_matched
        extra = [SAMPLE_BUDGET_OVERRIDE] if matched else []
        spec = run_spec(testbed, method, seed, lr, steps, config_name, extra=extra)
        args = spec.overrides()
        fingerprint = {
            "trainer": "fast",
            "fast_trainer_version": FAST_TRAINER_VERSION,
            "config": config_name,
            "workload_sha256": sha,
            "testbed": testbed.key,
            "method": method,
            "seed": seed,
            "lr": lr,
            "steps": budget,
            "overrides": args,
        }
        command = [python, "-m", FAST_MODULE, str(out), *spec.argv()]
        jobs.append(
            Job(name, out, command, budget, fingerprint, env=run_env(), cwd=REPO_ROOT, by_samples=matched)
        )
    return jobs


def real_jobs(
    testbed: Testbed,
    plan: Sequence[tuple[str, int, float]],
    runs_dir: Path,
    *,
    extra: Sequence[str] = (),
    steps: int | None = None,
    python: str = sys.executable,
    config_name: str = CONFIG_NAME,
) -> list[Job]:
    """One ``main_copo`` run per ``(method, seed, lr)``; ``extra`` overrides are added to every run."""
    budget = planned_steps(steps, config_name)
    sha = workload_sha256(config_name)
    jobs = []
    for method, seed, lr in plan:
        name = run_name(method, seed)
        out = runs_dir / name
        spec = run_spec(
            testbed,
            method,
            seed,
            lr,
            steps,
            config_name,
            checkpoints=out / "checkpoints",
            metrics=out / METRICS,
            extra=extra,
        )
        args = spec.overrides()
        fingerprint = {
            "trainer": "main_copo",
            "config": config_name,
            "workload_sha256": sha,
            "testbed": testbed.key,
            "method": method,
            "seed": seed,
            "lr": lr,
            "steps": budget,
            "overrides": args,
        }
        command = [
            python, "-m", "recipe.study.common.usage", str(out / USAGE), "--", *launch.command(spec, python),
        ]  # fmt: skip
        jobs.append(Job(name, out, command, budget, fingerprint, env=run_env(), cwd=REPO_ROOT))
    return jobs


def interleave(
    methods: Sequence[str], seeds: Sequence[int], lrs: dict[str, Sequence[float]]
) -> list[tuple[str, int, float]]:
    """``(method, seed, lr)`` for seed, then method, then lr (drift spreads over methods)."""
    return [(m, s, lr) for s in seeds for m in methods for lr in lrs[m]]
