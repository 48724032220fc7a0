"""recipe.bench.step (scripts/bench_step.py): its FLOP accounting and its plain-only mode (the day's speed in
plain work, run through the command line)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from recipe.bench.step import phase_flops
from recipe.models.tiny import build_tiny_qwen2
from tests.paths import REPO


def test_useful_flops_count_the_lm_head_at_response_positions_only() -> None:
    flops = phase_flops(params=100, head=30, rows=2, prompt_len=5.0, resp_len=3.0)
    forward = 2 * 70 * 2 * (5 + 3) + 2 * 30 * 2 * 3  # body at every token, head at the 3 response tokens
    assert flops["gen"] == flops["old_log_prob"] == flops["ref"] == forward
    assert flops["update_actor"] == 3 * forward
    assert flops["update_weights"] == 0.0


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_step.py"), *args],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COPO_CPU_THREADS": "1", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_plain_only_names_what_the_shape_lacks(tmp_path) -> None:
    proc = _run("--plain-only", "--model", str(tmp_path), "--plain-shape", "rows=2,micro=2")
    assert proc.returncode != 0
    assert "--plain-shape 'rows=2,micro=2' lacks ['mini', 'prompt', 'response']" in proc.stderr


@pytest.mark.parametrize("shape", ["rows=2,prompt=3,response=2,micro=2,mini=two", "rows=2,size=3"])
def test_plain_only_refuses_a_malformed_shape(tmp_path, shape: str) -> None:
    proc = _run("--plain-only", "--model", str(tmp_path), "--plain-shape", shape)
    assert proc.returncode != 0 and "expected rows=N,prompt=N,response=N,micro=N,mini=N" in proc.stderr


def test_plain_only_times_each_phase_on_a_tiny_model(tmp_path) -> None:
    model = build_tiny_qwen2(tmp_path / "tiny")
    proc = _run(
        "--plain-only", "--model", str(model), "--plain-shape", "rows=4,prompt=5,response=3,micro=2,mini=4"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split()}
    for phase in ("gen", "old_log_prob", "update_actor"):
        assert "roofline before it" in lines[phase], proc.stdout
    assert "roofline at the end" in proc.stdout
