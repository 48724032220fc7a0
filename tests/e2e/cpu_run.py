"""Helpers for the CPU end-to-end tests: tiny parquet data and a trainer subprocess runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
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
    """Environment of a trainer subprocess: offline, single-threaded BLAS (the machine is shared)."""
    env = dict(os.environ)
    env.update(
        {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            "TOKENIZERS_PARALLELISM": "false",
            "RAY_DEDUP_LOGS": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    # Ray's logical GPU (the CPU worker slot) is refused when CUDA_VISIBLE_DEVICES is "".
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
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
