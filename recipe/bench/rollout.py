"""HF rollout vs verl's vLLM rollout on CPU, side by side: one quickstart-sized run of each.

    python scripts/bench_rollout.py --model DIR --data DIR [--steps 2] [--out runs/bench_rollout]

Each run is ``recipe.quickstart.run`` (copo_cpu.yaml's workload, validation before and after) with
``--rollout hf`` in the main venv and ``--rollout vllm`` in .venv-vllm (scripts/setup_vllm_cpu.sh),
one after the other. Per run: start-up (wall time before the first training step began: Ray, the
rollout server, loading, the first validation excluded), generation seconds per step (verl's
``timing_s/gen``), validation seconds (``timing_s/testing``, mean of the two), total wall time, and the
peak RSS of the whole process tree (sampled every 0.5 s; shared pages count once per process, so
it overstates). Prints one markdown row per rollout with the load average beside the times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from statistics import mean

import psutil

from recipe.files import REPO_ROOT
from recipe.tracking.jsonl import read_metrics_jsonl
from recipe.tracking.names import GEN_TIME, STEP_TIME, TEST_TIME

VENVS = {"hf": Path(os.environ.get("COPO_VENV", ".venv")), "vllm": Path(os.environ.get("COPO_VLLM_VENV", ".venv-vllm"))}


def _tree_rss(root: psutil.Process) -> int:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def run_one(rollout: str, model: str, data: str, out: Path, steps: int) -> dict:
    py = REPO_ROOT / VENVS[rollout] / "bin" / "python"
    cmd = [str(py), "scripts/quickstart_run.py", "--model", model, "--data", data, "--out", str(out)]
    cmd += ["--steps", str(steps), "--rollout", rollout, "--label", f"bench-{rollout}"]
    load_start = os.getloadavg()[0]
    start = time.monotonic()
    peak = 0
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        peak = max(peak, _tree_rss(root))
        time.sleep(0.5)
    total = time.monotonic() - start
    rows = read_metrics_jsonl(out / "metrics.jsonl")
    train = [r for r in rows if GEN_TIME in r and int(r.get("step", 0)) > 0]
    val = [float(r[TEST_TIME]) for r in rows if TEST_TIME in r]
    step_s = sum(float(r[STEP_TIME]) for r in train)
    first_val = val[0] if val else 0.0
    return {
        "rollout": rollout,
        "rc": proc.returncode,
        "steps": len(train),
        # everything that is not a step or a validation: start-up, plus the exit (Ray shutdown)
        "startup_and_exit_s": round(total - step_s - sum(val), 1),
        "gen_s_per_step": round(mean(float(r[GEN_TIME]) for r in train), 2) if train else None,
        "step_s": round(step_s / len(train), 2) if train else None,
        "validation_s": round(mean(val), 1) if val else None,
        "first_validation_s": round(first_val, 1),
        "total_s": round(total, 1),
        "peak_rss_gb": round(peak / 2**30, 1),
        "load1": [round(load_start, 1), round(os.getloadavg()[0], 1)],
    }


def markdown(rows: list[dict]) -> str:
    head = "| rollout | start-up + exit s | gen s/step | step s | validation s | total s | peak RSS GB | load |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r['rollout']} | {r['startup_and_exit_s']} | {r['gen_s_per_step']} | {r['step_s']} | "
            f"{r['validation_s']} | {r['total_s']} | {r['peak_rss_gb']} | {r['load1'][0]}-{r['load1'][1]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_rollout.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="local model folder")
    parser.add_argument("--data", required=True, help="data folder (as quickstart_run.py --data takes it)")
    parser.add_argument("--steps", type=int, default=2, help="training steps per rollout (default %(default)s)")
    parser.add_argument("--out", default="runs/bench_rollout", help="run folders and the table (default %(default)s)")
    parser.add_argument("--rollouts", default="hf,vllm", help="comma-separated rollouts to compare (default %(default)s)")
    args = parser.parse_args(argv)
    rows = []
    for rollout in args.rollouts.split(","):
        row = run_one(rollout, args.model, args.data, Path(args.out).resolve() / rollout, args.steps)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(markdown(rows))
    return 0 if all(r["rc"] == 0 for r in rows) else 1
