"""Evaluation's faults (issue item 5), on scripts/evaluate.py as a user runs it.

* A run folder holds a truncated FSDP shard and a half-written safetensors file among good checkpoints:
  each broken one is named with the reason, every good one is evaluated, the exit code says so.
* An evaluation killed with SIGKILL mid-way (its whole process group) resumes on the rerun without
  regenerating or rescoring a finished (checkpoint, dataset) pair (its files are not even rewritten), and
  ends with exactly the results of an evaluation that was never interrupted.
These run in CI: a few seconds of HF generation on the tiny model each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from recipe.evaluation.runner import HOLD_MESSAGE, HOLD_PAIR_ENV
from recipe.models.tiny import build_tiny_qwen2
from tests.e2e.stopping import leftovers_after, start_tagged
from tests.faults.records import record
from tests.paths import REPO

pytestmark = [pytest.mark.faults, pytest.mark.ci]

EVALUATE = [sys.executable, str(REPO / "scripts" / "evaluate.py")]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def write_dataset(path: Path, data_source: str, rows: int) -> Path:
    records = [
        {
            "prompt": [{"role": "user", "content": f"question {i}: what is {i}+1?"}],
            "data_source": data_source,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {"split": "test", "index": i},
        }
        for i in range(rows)
    ]
    pd.DataFrame(records).to_parquet(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("model") / "tiny")


def hf_step(run: Path, step: int, model: Path) -> Path:
    """global_step_N/actor with full HF weights in huggingface/ (verl's hf_model save contents)."""
    target = run / f"global_step_{step}" / "actor" / "huggingface"
    shutil.copytree(model, target)
    return target


def test_a_truncated_checkpoint_is_named_and_takes_no_other_down(tmp_path: Path, tiny: Path) -> None:
    run = tmp_path / "run"
    for step in (1, 4):
        hf_step(run, step, tiny)
    # step 2: FSDP shards (no HF weights), the model shard cut short as by a save killed mid-write
    actor = run / "global_step_2" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for f in tiny.iterdir():
        if not f.name.endswith(".safetensors"):
            shutil.copy(f, actor / "huggingface" / f.name)
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    shard = actor / "model_world_size_1_rank_0.pt"
    torch.save({"w": torch.zeros(4096)}, shard)
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    # step 3: full HF weights whose safetensors file was half copied
    weights = hf_step(run, 3, tiny) / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)

    data = write_dataset(tmp_path / "val.parquet", "tiny_ds", 3)
    out = tmp_path / "out"
    cmd = [*EVALUATE, "--model", str(run), "--data", str(data), "--k", "2", "--max-tokens", "8"]
    cmd += ["--backend", "hf", "--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - t0
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log[-4000:]
    assert f"{shard} is truncated or corrupted" in log, log[-4000:]
    assert "ERROR run/global_step_3" in log and "cannot be loaded, skipped" in log
    assert (
        "2 checkpoint(s) could not be loaded and were not evaluated: run/global_step_2, run/global_step_3"
        in log
    )
    rows = {(r["checkpoint"], r["dataset"]) for r in pd.read_csv(out / "summary.csv").to_dict("records")}
    assert rows == {("run/global_step_1", "tiny_ds"), ("run/global_step_4", "tiny_ds")}, rows
    assert (
        shard.stat().st_size > 0
        and (run / "global_step_4" / "actor" / "huggingface" / "model.safetensors").is_file()
    )
    record(
        "5a-eval-truncated-checkpoint",
        "truncated checkpoints among good ones (evaluation)",
        "a run folder whose global_step_2 model shard and global_step_3 safetensors are cut in half",
        stop_s=elapsed,
        steps_lost=None,
        processes_left=0,
        resumed_same_next_step=None,
        note="each broken one named with its file/reason; the good ones evaluated; exit 1 (time: the whole evaluation)",
    )


def pair_files(out: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime ns) of every stored pair file: a rewritten file changes both."""
    return {
        str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(out.glob("pairs/*/*"))
    }


def test_an_evaluation_killed_midway_resumes_without_rescoring(tmp_path: Path, tiny: Path) -> None:
    models = []
    for i in range(3):
        models.append(tmp_path / f"model{i}")
        shutil.copytree(tiny, models[-1])
    data = write_dataset(tmp_path / "val.parquet", "tiny_ds", 8)
    args = ["--data", str(data), "--k", "4", "--max-tokens", "48", "--batch-size", "4", "--backend", "hf"]
    cmd = [*EVALUATE, "--model", *map(str, models), *args]

    out = tmp_path / "out"
    # The evaluation holds the second pair after its first generated batch (a test hook), so the kill
    # lands mid-generation for certain: a fixed sleep lost the race on a fast machine (all 3 finished).
    held = {**env(), HOLD_PAIR_ENV: "2"}
    log_path = tmp_path / "killed.log"
    proc, tag = start_tagged([*cmd, "--out", str(out)], held, log_path, REPO)
    try:
        deadline = time.monotonic() + 300
        while HOLD_MESSAGE.format(number=2) not in log_path.read_text(errors="replace"):
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the evaluation never reached the second pair"
            time.sleep(0.1)
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        left = leftovers_after(tag, grace_s=30)
        stop_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not left, left
    finished = pair_files(out)
    n_finished = len([n for n in finished if n.endswith(".summary.json")])
    assert n_finished == 1, finished  # the first pair, stored; the second, killed mid-generation

    rerun = subprocess.run(
        [*cmd, "--out", str(out)], cwd=REPO, env=env(), capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert rerun.stderr.count("complete, skipped") == n_finished
    after = pair_files(out)
    assert {name: after[name] for name in finished} == finished, "a finished pair was written again"

    fresh = tmp_path / "fresh"
    clean = subprocess.run(
        [*cmd, "--out", str(fresh)], cwd=REPO, env=env(), capture_output=True, text=True, timeout=600
    )
    assert clean.returncode == 0, clean.stderr[-4000:]
    same = (out / "samples.jsonl").read_text() == (fresh / "samples.jsonl").read_text()
    assert same, "the resumed evaluation's samples differ from an uninterrupted one's"
    record(
        "5b-eval-killed-midway",
        "evaluation killed mid-way",
        f"SIGKILL to evaluate.py's process group after {n_finished} of 3 pairs were stored",
        stop_s=stop_s,
        steps_lost=None,
        processes_left=len(left),
        resumed_same_next_step=same,
        note="rerun skipped the stored pairs (files untouched) and ended with an uninterrupted run's samples",
        load_1min=load,
    )
