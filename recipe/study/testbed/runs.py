"""The testbed study's training runs: one ``main_copo --config-name testbed_cpu`` process per (method, seed).

The workload (batch, group size, lengths, learning rate, validation, steps) is pinned in
``recipe/copo/config/testbed_cpu.yaml``; a run adds only its paths, its seed (data order and rollout
sampling) and its method's overrides (``recipe/study/methods.py``). The plan is interleaved, for each
seed every method, so that drift in the machine's speed over the study hits all methods alike.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe import launch
from recipe.cpu_backend.job_env import cpu_job_env
from recipe.files import REPO_ROOT
from recipe.launch import RunSpec
from recipe.study.driver import METRICS, Job
from recipe.study.methods import METHODS
from recipe.study.testbed.build import Testbed

CONFIG_NAME = "testbed_cpu"
CONFIG_PATH = REPO_ROOT / "recipe" / "copo" / "config" / f"{CONFIG_NAME}.yaml"
# One thread per run: the study runs two at a time on this 2-core machine.
THREADS = 1


def run_name(method: str, seed: int) -> str:
    return f"{method}-s{seed}"


def workload() -> Any:
    """The pinned workload: ``testbed_cpu.yaml``'s own keys (not its defaults), as an OmegaConf node."""
    from omegaconf import OmegaConf

    return OmegaConf.load(CONFIG_PATH)


def workload_sha256() -> str:
    """Hash of the pinned workload's values (comments and layout do not count)."""
    from omegaconf import OmegaConf

    return hashlib.sha256(OmegaConf.to_yaml(workload(), sort_keys=True).encode()).hexdigest()


def planned_steps(steps: int | None) -> int:
    """``steps`` when given (a pilot), else the workload's ``trainer.total_training_steps``."""
    return int(steps if steps is not None else workload().trainer.total_training_steps)


def run_spec(testbed: Testbed, method: str, seed: int, out: Path, steps: int | None) -> RunSpec:
    """One run of ``--config-name testbed_cpu``: the testbed's paths, the seed, the method, its folders."""
    return RunSpec(
        CONFIG_NAME,
        model=testbed.model,
        train_files=testbed.data / "train.parquet",
        val_files=testbed.data / "val.parquet",
        seed=seed,
        settings={"trainer.experiment_name": run_name(method, seed)},
        steps=steps,
        method=tuple(METHODS[method]),
        checkpoints=out / "checkpoints",
        metrics=out / METRICS,
    )


def run_overrides(testbed: Testbed, method: str, seed: int, out: Path, steps: int | None) -> list[str]:
    """Hydra overrides of one run, after ``--config-name testbed_cpu``."""
    return run_spec(testbed, method, seed, out, steps).overrides()


def run_env() -> dict[str, str]:
    """What a run adds to the driver's environment: one thread, offline, the CPU backend (``cpu_job_env``)."""
    return cpu_job_env({}, threads=THREADS)


def make_jobs(
    testbed: Testbed,
    methods: Sequence[str],
    seeds: Sequence[int],
    runs_dir: Path,
    steps: int | None = None,
    python: str = sys.executable,
) -> list[Job]:
    """The study's runs in plan order: for each seed, every method."""
    budget = planned_steps(steps)
    config_sha = workload_sha256()
    jobs = []
    for seed in seeds:
        for method in methods:
            name = run_name(method, seed)
            out = runs_dir / name
            fingerprint = {
                "config": CONFIG_NAME,
                "workload_sha256": config_sha,
                "testbed": testbed.key,
                "method": method,
                "method_overrides": METHODS[method],
                "seed": seed,
                "steps": budget,
            }
            command = launch.command(run_spec(testbed, method, seed, out, steps), python)
            jobs.append(Job(name, out, command, budget, fingerprint, env=run_env(), cwd=REPO_ROOT))
    return jobs
