"""The GPU preflight as CI runs it: the same command on CPU with a tiny model of the 3B run's shape.

``python scripts/gpu_check.py --config-name copo_qwen2.5_3b --tiny`` builds copo_qwen2.5_3b's actor
as verl's worker builds it (bf16, FSDP2, fused log-probs, dynamic micro-batches) on two narrow
layers under Qwen2.5's 151,936-token vocabulary, checks COPO against vanilla and the log-prob
op count, and runs two trainer steps with the hf rollout and a checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from recipe.preflight.measure import LOOP_OPS_PER_TOKEN
from tests.paths import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]


def test_preflight_runs_every_stage_on_cpu(tmp_path) -> None:
    out = tmp_path / "gpu_check"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_check.py",
            "--config-name",
            "copo_qwen2.5_3b",
            "--tiny",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
    )
    table = proc.stdout
    assert proc.returncode == 0, f"{table}\n{proc.stderr[-3000:]}"
    verdicts = {}  # (stage, check) -> verdict, from the table's columns (two or more spaces apart)
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 4 and cells[-1] in ("ok", "FAIL", "MISS", "WARN", "SKIP"):
            verdicts[(cells[0], cells[1])] = cells[-1]
    assert verdicts[("parity", "COPO (local weight 1) vs vanilla")] == "ok"
    assert verdicts[("log-probs", "log-softmax-family ops")] == "ok"
    assert verdicts[("trainer", "Ray + rollout + reward + COPO step + checkpoint")] == "ok"
    assert verdicts[("environment", "verl")] == "ok"
    assert "FAIL" not in verdicts.values()
    result = json.loads((out / "actor.json").read_text())
    assert result["ops"]["per_token"] < LOOP_OPS_PER_TOKEN and result["ops"]["tokens"] > 400
    assert (
        result["settings"]["fused_kernels"].startswith("True")
        and result["settings"]["compute_dtype"] == "bfloat16"
    )
    assert "151936" in (out / "models").joinpath(os.listdir(out / "models")[0], "config.json").read_text()
    assert (out / "trainer" / "ckpt" / "global_step_2").is_dir()
    assert (out / "table.txt").read_text().strip() == table.strip()
