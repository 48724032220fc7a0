"""The vllm_cpu tests' harness: the second venv (.venv-vllm) and a process tree run with its peak memory.

The tests themselves run in the main venv; everything that imports vLLM runs as a subprocess of
.venv-vllm's python. Each run's wall time and peak RSS (summed over the process tree, sampled every
0.2 s) is printed and, when ``COPO_VLLM_CPU_RECORD`` names a file, appended to it as a JSON line
(scripts/test.sh's record of what the vLLM tests cost).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from recipe.cpu_backend.vllm_rollout import ENV_DEFAULTS
from tests.paths import REPO

VLLM_VENV = Path(os.environ.get("COPO_VLLM_VENV", REPO / ".venv-vllm"))
VLLM_PY = VLLM_VENV / "bin" / "python"

OPT_OUT = os.environ.get("COPO_VLLM_CPU", "1").strip() == "0"
# Set by scripts/test.sh while it builds the venv in the background: the file that will hold the
# build's exit status, and its log. The vllm_cpu tests then wait for it (tests/vllm_cpu/conftest.py).
BUILD_RC = os.environ.get("COPO_VLLM_BUILD_RC")
BUILD_LOG = os.environ.get("COPO_VLLM_BUILD_LOG")
BUILD_WAIT_S = 45 * 60  # a first build takes 3-7 min; a pip stuck for 45 min is a failure, not a wait
requires_vllm_venv = pytest.mark.skipif(
    OPT_OUT or not (VLLM_PY.is_file() or BUILD_RC),
    reason="COPO_VLLM_CPU=0" if OPT_OUT else f"no {VLLM_VENV} (bash scripts/setup_vllm_cpu.sh builds it; scripts/test.sh does)",
)


def wait_for_build() -> str | None:
    """Wait for the background build scripts/test.sh started (none pending: return at once). None when it
    ended well; else what went wrong, with the log's tail: it failed, or it still ran after ``BUILD_WAIT_S``."""
    if not BUILD_RC:
        return None
    rc_file = Path(BUILD_RC)
    deadline = time.monotonic() + BUILD_WAIT_S
    if not rc_file.is_file():
        print(f"\n[vllm_cpu] waiting for the {VLLM_VENV} build (log: {BUILD_LOG})", flush=True)
    while not rc_file.is_file():
        if time.monotonic() > deadline:
            return f"the {VLLM_VENV} build still ran after {BUILD_WAIT_S} s; log: {BUILD_LOG}"
        time.sleep(2)
    rc = rc_file.read_text().strip()
    if rc == "0":
        return None
    log = Path(BUILD_LOG).read_text(errors="replace").splitlines()[-40:] if BUILD_LOG else []
    return f"building {VLLM_VENV} failed (rc {rc}; bash scripts/setup_vllm_cpu.sh):\n" + "\n".join(log)

def vllm_env(base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    for key, value in ENV_DEFAULTS.items():
        env.setdefault(key, value)
    env["PYTHONPATH"] = str(REPO)
    return env


@dataclass
class TreeRun:
    returncode: int
    wall_s: float
    peak_rss_gb: float
    log: str
    # (pid, create_time) of every process seen in the tree while it ran (the root's own session's and
    # the ones in groups of their own: psutil follows parenthood), for :func:`survivors`
    seen: set[tuple[int, float]] = field(default_factory=set)


def _tree_rss(root: psutil.Process, seen: set[tuple[int, float]]) -> int:
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            seen.add((proc.pid, proc.create_time()))
            total += proc.memory_info().rss
    return total


def survivors(run: TreeRun) -> list[str]:
    """Processes of the run's tree still alive after it ended (a pid reused since counts not:
    its creation time differs), as ``pid cmdline``."""
    alive = []
    for pid, created in run.seen:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{pid} {' '.join(proc.cmdline())[:200]}")
    return alive


def run_tree(name: str, cmd: list[str], env: dict[str, str], log_path: Path, timeout_s: float) -> TreeRun:
    """Run ``cmd`` in its own process group; on timeout kill the group. Records wall time and peak RSS."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    peak = 0
    seen: set[tuple[int, float]] = set()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            peak = max(peak, _tree_rss(root, seen))
            if time.monotonic() - start > timeout_s:
                os.killpg(proc.pid, 9)
                proc.wait()
                break
            time.sleep(0.2)
    run = TreeRun(proc.returncode, time.monotonic() - start, peak / 2**30, log_path.read_text(errors="replace"), seen)
    record(name, run)
    return run


def record(name: str, run: TreeRun) -> None:
    row = {
        "test": name,
        "rc": run.returncode,
        "wall_s": round(run.wall_s, 1),
        "peak_rss_gb": round(run.peak_rss_gb, 2),
        "load1": round(os.getloadavg()[0], 2),
    }
    print(f"[vllm_cpu] {json.dumps(row)}")
    path = os.environ.get("COPO_VLLM_CPU_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def tail(run: TreeRun, lines: int = 60) -> str:
    return "\n".join(run.log.splitlines()[-lines:])
