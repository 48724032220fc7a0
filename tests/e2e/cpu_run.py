"""Helpers for the CPU end-to-end tests: tiny parquet data and a trainer subprocess runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from recipe.cpu_backend.job_env import cpu_job_env
from recipe.launch import TINY_CPU, RunSpec, tiny_run
from tests.paths import REPO

REPO_ROOT = REPO
PARITY_REWARD = Path(__file__).with_name("parity_reward.py")


def write_prompt_parquet(path: Path, rows: int, *, seed: int = 0) -> Path:
    """``rows`` single-turn prompts in verl's RLHF parquet layout (prompt/reward_model/extra_info)."""
    import random

    import pandas as pd

    rng = random.Random(seed)
    records = []
    for i in range(rows):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        records.append(
            {
                "data_source": "tiny_arith",
                "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i, "split": "test"},
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame.from_records(records).to_parquet(path)
    return path


def cpu_env() -> dict[str, str]:
    """Environment of a trainer subprocess: the project's CPU job environment (offline, one thread per
    process: the machine is shared), as a user's plain command gets it (main_copo selects the CPU backend
    itself), with Ray's logs undeduplicated."""
    env = cpu_job_env(threads=1, platform=False)
    env["RAY_DEDUP_LOGS"] = "0"
    # CPU tests: no GPU is named to Ray (and an empty value would make Ray refuse its logical GPU).
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


@dataclass
class RunResult:
    returncode: int
    log: str
    log_path: Path


def run_module(module: str, overrides: list[str], *, log_path: Path, timeout: float) -> RunResult:
    """Run ``python -m <module> <overrides>`` from the repo root, output teed to ``log_path``.

    Always ends with ``ray stop``-equivalent cleanup: the trainer shuts down its own local Ray
    cluster on exit; on a timeout the whole process group is killed.
    """
    cmd = [sys.executable, "-m", module, *overrides]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=cpu_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = -9
    return RunResult(rc, log_path.read_text(errors="replace"), log_path)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tiny_recipe_spec(model: Path, train: Path, val: Path, ckpt: Path, *, steps: int = 2) -> RunSpec:
    """The shared spec of a short ``main_copo --config-name copo_cpu`` run: the tiny run (4 prompts x 4
    responses, mini-batches of 2 prompts and micro-batches of 2 responses so every group is split), the
    parity reward, no checkpoints."""
    settings = {
        **TINY_CPU,
        "reward.custom_reward_function.path": PARITY_REWARD,
        "trainer.save_freq": -1,
        "trainer.resume_mode": "disable",
    }
    return tiny_run(
        "copo_cpu",
        model=model,
        train_files=train,
        val_files=val,
        settings=settings,
        steps=steps,
        checkpoints=ckpt,
    )


def tiny_recipe_overrides(tmp_path: Path, *, steps: int = 2) -> tuple[list[str], Path]:
    """Build the tiny model and a 16/4-row parquet pair in ``tmp_path``; return the arguments of
    :func:`tiny_recipe_spec` (``--config-name copo_cpu`` and its overrides) and the run folder, whose
    ``metrics.jsonl`` holds one line per step."""
    from recipe.models.tiny import build_tiny_qwen2

    model = build_tiny_qwen2(tmp_path / "tiny")
    train = write_prompt_parquet(tmp_path / "train.parquet", 16, seed=0)
    val = write_prompt_parquet(tmp_path / "val.parquet", 4, seed=1)
    ckpt = tmp_path / "ckpt"
    return tiny_recipe_spec(model, train, val, ckpt, steps=steps).argv(), ckpt
