"""What was tried to make testbed v2 learn, after its tuning showed GRPO barely moving (docs/STUDY_CPU.md).

Every probe is GRPO through the fast trainer from testbed v2's SFT policy, on seeds no confirmatory
plan uses (1000-1001 were v2's tuning seeds, 2000+ are new), with one change from the v2 workload:

* ``v2``: v2's own data (all levels);
* ``small16``: 16 training prompts, trained and validated on (does the trainer move the policy at all?);
* ``learnable``: v2's held-out pool (its validation and training problems, which SFT never saw) re-split
  toward the levels where the SFT policy is between 10% and 60% at T = 1: validation 256 add2x2 and 256
  add3x3, 128 of each max level (1,024), training the rest;
* ``max_only``: the same pool's max problems only: validation 256 per level (1,024), training the rest.

``study_testbed2.py explore`` runs them (resumable, two at a time); ``summarize`` writes their curves to
``exploration.csv`` and the docs' ``exploration`` block.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe.files import REPO_ROOT
from recipe.launch import RunSpec
from recipe.study.common import jobs
from recipe.study.driver import Job
from recipe.study.methods import METHODS
from recipe.study.testbed.build import Testbed
from recipe.study.testbed.runs import run_env
from recipe.study.testbed2.plan import CONFIG_NAME

LEARNABLE_VAL = {"add2x2": 256, "add3x3": 256, "max2x2": 128, "max3x3": 128, "max4x4": 128, "max5x5": 128}
MAX_ONLY_VAL = {"max2x2": 256, "max3x3": 256, "max4x4": 256, "max5x5": 256}
DATA_KINDS = ("v2", "small16", "learnable", "max_only")


@dataclass(frozen=True)
class Probe:
    """One exploratory GRPO run: a data kind, a seed, a learning rate and workload overrides."""

    name: str
    data: str
    seed: int
    lr: float
    overrides: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        changes = ", ".join(
            o.split("=", 1)[0].rsplit(".", 1)[-1] + "=" + o.split("=", 1)[1] for o in self.overrides
        )
        return f"{self.data} data, lr {self.lr:g}" + (f", {changes}" if changes else "")


_STEPS = "trainer.total_training_steps="
_FREQ = "trainer.test_freq="
PROBES = (
    Probe("max_only-lr1e-4-400-s2002", "max_only", 2002, 1e-4, (_STEPS + "400", _FREQ + "100")),
    Probe("max_only-lr1e-4-400-s2003", "max_only", 2003, 1e-4, (_STEPS + "400", _FREQ + "100")),
    Probe("g8-lr1e-4", "v2", 1000, 1e-4, ("actor_rollout_ref.rollout.n=8", _STEPS + "60", _FREQ + "30")),
    Probe("g8-lr3e-4", "v2", 1000, 3e-4, ("actor_rollout_ref.rollout.n=8", _STEPS + "60", _FREQ + "30")),
    Probe("small16-lr1e-4", "small16", 2000, 1e-4, (_STEPS + "60", _FREQ + "20")),
    Probe("small16-lr3e-4", "small16", 2000, 3e-4, (_STEPS + "60", _FREQ + "20")),
    Probe("learnable-lr1e-4-300", "learnable", 2000, 1e-4, (_STEPS + "300", _FREQ + "50")),
    Probe("learnable-lr2e-4-300", "learnable", 2000, 2e-4, (_STEPS + "300", _FREQ + "50")),
    Probe(
        "learnable-b32-lr1e-4-200",
        "learnable",
        2001,
        1e-4,
        (
            "data.train_batch_size=32",
            "actor_rollout_ref.actor.ppo_mini_batch_size=32",
            _STEPS + "200",
            _FREQ + "100",
        ),
    ),
    Probe(
        "learnable-lr3e-4-warmup20-clip0.3",
        "learnable",
        2001,
        3e-4,
        ("actor_rollout_ref.actor.optim.lr_warmup_steps=20", "actor_rollout_ref.actor.optim.clip_grad=0.3")
        + (_STEPS + "200", _FREQ + "100"),
    ),
)


def prepare_data(testbed: Testbed, kind: str, out_dir: Path) -> tuple[Path, Path]:
    """``(train, val)`` parquet files of a data kind (written once into ``out_dir``; deterministic)."""
    import pandas as pd

    from recipe.study.testbed.mixed import level_of

    if kind not in DATA_KINDS:
        raise ValueError(f"unknown exploration data {kind!r}; choose from {DATA_KINDS}")
    if kind == "v2":
        return testbed.data / "train.parquet", testbed.data / "val.parquet"
    folder = out_dir / kind
    train, val = folder / "train.parquet", folder / "val.parquet"
    if train.is_file() and val.is_file():
        return train, val
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "small16":
        small = pd.read_parquet(testbed.data / "train.parquet").iloc[:16]
        small.to_parquet(train)
        small.to_parquet(val)
        return train, val
    pool = pd.concat(
        [pd.read_parquet(testbed.data / "val.parquet"), pd.read_parquet(testbed.data / "train.parquet")],
        ignore_index=True,
    )
    levels = [level_of(str(info["original_id"])) for info in pool.extra_info]
    counts = LEARNABLE_VAL if kind == "learnable" else MAX_ONLY_VAL
    val_parts, train_parts = [], []
    for level, n in counts.items():
        rows = pool[[lv == level for lv in levels]].sample(frac=1.0, random_state=0)
        val_parts.append(rows.iloc[:n])
        train_parts.append(rows.iloc[n:])
    pd.concat(val_parts).to_parquet(val)
    pd.concat(train_parts).sample(frac=1.0, random_state=0).to_parquet(train)
    return train, val


def probe_spec(testbed: Testbed, probe: Probe, data_dir: Path) -> RunSpec:
    """The probe's run of ``--config-name testbed2_cpu``: GRPO with its data, seed, lr and overrides."""
    train, val = prepare_data(testbed, probe.data, data_dir)
    return RunSpec(
        CONFIG_NAME,
        model=testbed.model,
        train_files=train,
        val_files=val,
        seed=probe.seed,
        settings={"actor_rollout_ref.actor.optim.lr": probe.lr, "trainer.experiment_name": probe.name},
        method=(*METHODS["grpo"], *probe.overrides),
    )


def probe_overrides(testbed: Testbed, probe: Probe, data_dir: Path) -> list[str]:
    """The probe's Hydra overrides after ``--config-name testbed2_cpu``."""
    return probe_spec(testbed, probe, data_dir).overrides()


__all__ = ["CONFIG_NAME", "PROBES", "Probe", "prepare_data", "probe_jobs", "probe_overrides"]


def probe_jobs(
    testbed: Testbed, probes: Sequence[Any], runs_dir: Path, data_dir: Path, python: str = sys.executable
) -> list[Job]:
    """One fast run per exploration probe (:data:`PROBES`)."""
    from omegaconf import OmegaConf

    sha = jobs.workload_sha256()
    out_jobs = []
    for probe in probes:
        out = runs_dir / probe.name
        spec = probe_spec(testbed, probe, data_dir)
        args = spec.overrides()
        steps_override = [o for o in args if o.startswith("trainer.total_training_steps=")]
        steps = (
            int(steps_override[-1].split("=", 1)[1])
            if steps_override
            else int(OmegaConf.load(jobs.CONFIG_PATH).trainer.total_training_steps)
        )
        fingerprint = {
            "trainer": "fast",
            "fast_trainer_version": jobs.FAST_TRAINER_VERSION,
            "config": CONFIG_NAME,
            "workload_sha256": sha,
            "testbed": testbed.key,
            "probe": probe.name,
            "overrides": args,
        }
        command = [python, "-m", jobs.FAST_MODULE, str(out), *spec.argv()]
        out_jobs.append(Job(probe.name, out, command, steps, fingerprint, env=run_env(), cwd=REPO_ROOT))
    return out_jobs
