"""scripts/bench_gcpo.py runs end to end at a tiny size and prints its table and target line."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.paths import REPO


def test_bench_gcpo_small_run_prints_both_cases():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_gcpo.py"), "--prompts", "4", "--embedder", "hash"]
        + ["--repeats", "1", "--permutations", "8", "--embed-limit", "16", "--threads", "1"],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [
        line for line in proc.stdout.splitlines() if line.startswith("| 8 |") or line.startswith("| 16 |")
    ]
    assert len(rows) == 2, proc.stdout
    assert "| 8 | exact | 32 |" in rows[0]
    assert "| 16 | monte carlo, 8 perms | 64 | " in rows[1] and "(scaled)" in rows[1]
    assert "target (min of repeats): exact Shapley G=8 x 4 groups" in proc.stdout
