"""What the testbed studies record about the machine and the plan beside their runs (shared by v2 and v3).

- ``record_machine``: the one-thread matmul speed at the model's shapes, the load and the checkout's
  commit (the plan's, for a confirmatory phase), appended to ``<runs>/machine.jsonl`` at each phase's
  start and end;
- ``committed``: whether a plan file is tracked by git with no uncommitted change (the confirmatory
  phases refuse to start before the plan is committed).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from recipe.files import REPO_ROOT

MACHINE_LOG = "machine.jsonl"


def record_machine(runs: Path, testbed_: Any, when: str) -> None:
    """Append this machine's one-thread matmul speed at the model's shapes (and the load) to the log.

    ``testbed_``: a ``recipe.study.testbed.build.Testbed`` (its ``model`` folder is measured).
    """
    import os

    import torch

    from recipe.cpu_backend.roofline import roofline_gflops

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gflops = roofline_gflops(testbed_.model)
    finally:
        torch.set_num_threads(threads)
    runs.mkdir(parents=True, exist_ok=True)
    entry = {
        "time": time.time(),
        "when": when,
        "gflops": round(gflops, 2),
        "load1": os.getloadavg()[0],
        "commit": head_commit(),  # the plan's commit the phase ran under, recorded as it happens
    }
    with open(runs / MACHINE_LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")
    print(
        f"[study] machine: {gflops:.1f} GFLOP/s (one thread), load {entry['load1']:.1f} ({when})", flush=True
    )


def committed(path: Path, root: Path = REPO_ROOT) -> bool:
    """True when ``path`` is tracked by git (in the checkout ``root``) and has no uncommitted change."""
    rel = str(path.relative_to(root))
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", rel], cwd=root, capture_output=True)
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", rel], cwd=root)
    return tracked.returncode == 0 and dirty.returncode == 0


def head_commit(root: Path = REPO_ROOT) -> str | None:
    """The checkout's commit (``git rev-parse HEAD``), or None outside a git checkout."""
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None
