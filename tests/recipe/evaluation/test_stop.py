"""scripts/evaluate.py stopped mid-run (SIGTERM from timeout/Slurm/docker stop, SIGINT from Ctrl-C):
every process it started is gone, it exits with 128 + the signal, and finished (checkpoint x dataset)
pairs stay on disk for the rerun, which skips them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from recipe.evaluation.runner import HOLD_MESSAGE, HOLD_PAIR_ENV
from recipe.models.tiny import build_tiny_qwen2
from tests.paths import REPO

EVALUATE = REPO / "scripts" / "evaluate.py"
SLOW_ENGINE = "tests.recipe.evaluation.slow_engine:SlowEngine"


def write_dataset(path: Path, data_source: str, word: str, rows: int) -> Path:
    records = [
        {
            "prompt": [{"role": "user", "content": f"{word} question {i}: what is {i}+1?"}],
            "data_source": data_source,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {"split": "test", "index": i, "original_id": f"{data_source}{i}"},
        }
        for i in range(rows)
    ]
    pd.DataFrame(records).to_parquet(path)
    return path


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (children, grandchildren, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    found, queue = set(), [root]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in found:
                found.add(child)
                queue.append(child)
    return {pid for pid in found if alive(pid)}


def wait_for(condition, timeout_s: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"evaluate.py exited early ({proc.returncode}) waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_qwen2(tmp_path_factory.mktemp("model") / "tiny")


def evaluate(args: list[str], log: Path, **env: str) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env}
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, str(EVALUATE), *args], cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT
        )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_mid_pair_ends_every_worker_and_keeps_finished_pairs(
    tmp_path: Path, tiny_model: Path, signum: int
) -> None:
    fast = write_dataset(tmp_path / "fast.parquet", "fast_ds", "fast", 4)
    slow = write_dataset(tmp_path / "slow.parquet", "slow_ds", "slow", 4)
    out, pids_file = tmp_path / "out", tmp_path / "engine_pids"
    args = ["--model", str(tiny_model), "--data", str(fast), str(slow), "--k", "2", "--out", str(out)]
    vllm = ["--backend", "vllm", "--vllm-engine", SLOW_ENGINE]
    # Two "GPUs": two worker process groups, each with an engine-core grandchild.
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "SLOW_ENGINE_PIDS": str(pids_file)}
    proc = evaluate([*args, *vllm], tmp_path / "run.log", **env)
    try:
        wait_for(lambda: list(out.glob("pairs/*/fast_ds-*.summary.json")), 120, proc, "the first pair")
        wait_for(lambda: pids_file.is_file() and len(pids_file.read_text().split()) == 4, 60, proc, "engines")
        started = descendants(proc.pid)
        engine_pids = {int(p) for p in pids_file.read_text().split()}
        assert engine_pids <= started and len(started) >= 4, (started, engine_pids)
        time.sleep(1)  # the slow pair is now in flight
        proc.send_signal(signum)
        rc = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "run.log").read_text()
    assert rc == 128 + signum, log[-3000:]
    time.sleep(0.5)
    assert not [pid for pid in started if alive(pid)], f"left behind: {[p for p in started if alive(p)]}"
    assert f"stopped by {signal.Signals(signum).name}" in log
    # the finished pair is on disk, the one in flight is not
    assert list(out.glob("pairs/*/fast_ds-*.summary.json")) and not list(out.glob("pairs/*/slow_ds-*.summary.json"))

    # The rerun keeps the finished pair and does only the missing one (here with the fast stand-in).
    rerun = evaluate(
        [*args, "--backend", "vllm", "--vllm-engine", "recipe.evaluation.backends.vllm_backend:EchoEngine"],
        tmp_path / "rerun.log",
        CUDA_VISIBLE_DEVICES="0",
    )
    assert rerun.wait(timeout=120) == 0, (tmp_path / "rerun.log").read_text()[-3000:]
    rerun_log = (tmp_path / "rerun.log").read_text()
    assert "fast_ds: complete, skipped" in rerun_log
    assert list(out.glob("pairs/*/slow_ds-*.summary.json"))


def test_sigterm_during_hf_generation_exits_cleanly_and_keeps_finished_pairs(
    tmp_path: Path, tiny_model: Path
) -> None:
    fast = write_dataset(tmp_path / "fast.parquet", "fast_ds", "fast", 2)
    long = write_dataset(tmp_path / "long.parquet", "long_ds", "long", 64)
    out = tmp_path / "out"
    args = ["--model", str(tiny_model), "--data", str(fast), str(long), "--out", str(out), "--backend", "hf"]
    # The long pair (the second) is held after its first batch (a test hook): the SIGTERM lands
    # mid-generation for certain, however fast the machine generates.
    log = tmp_path / "run.log"
    hold = {HOLD_PAIR_ENV: "2"}
    proc = evaluate([*args, "--k", "8", "--max-tokens", "64", "--batch-size", "4"], log, **hold)
    try:
        wait_for(lambda: HOLD_MESSAGE.format(number=2) in log.read_text(), 180, proc, "the long pair's first batch")
        assert list(out.glob("pairs/*/fast_ds-*.summary.json")), log.read_text()[-3000:]
        started = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "run.log").read_text()
    assert rc == 128 + signal.SIGTERM, log[-3000:]
    assert not [pid for pid in started if alive(pid)]
    assert list(out.glob("pairs/*/fast_ds-*.summary.json")) and not list(out.glob("pairs/*/long_ds-*.summary.json"))
    assert "fast_ds" in (out / "summary.md").read_text()
