"""The trainer's driver stops once (recipe/copo/driver_signals.py): two SIGTERMs in quick succession to a
driver with a local Ray cluster end it with 143, its Ray cluster with it, and no crash."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.stopping import kill_tagged, leftovers_after, start_tagged
from tests.paths import REPO

DRIVER = """
import sys, time
import ray
from recipe.copo.driver_signals import stop_once

with stop_once():
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=sys.argv[1])

    @ray.remote
    def busy():
        print("RUNNING", flush=True)  # the task is on a worker: Ray forwards its output to the driver's
        time.sleep(600)

    print("READY", flush=True)
    ray.get(busy.remote())
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_two_stop_signals_to_the_group_end_the_driver_once(tmp_path: Path, signum: int) -> None:
    temp = Path(f"/tmp/rq{os.getpid()}")  # Ray's socket paths must stay short
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
    log = tmp_path / "driver.log"
    proc, tag = start_tagged([sys.executable, "-c", DRIVER, str(temp)], env, log, REPO)
    try:
        deadline = time.monotonic() + 180
        while "RUNNING" not in log.read_text():  # the task is running on a worker, for certain
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signum)
        time.sleep(0.2)
        os.killpg(proc.pid, signum)
        rc = proc.wait(timeout=60)
        left = leftovers_after(tag, grace_s=30)
    finally:
        kill_tagged(tag)
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(temp, ignore_errors=True)
    assert rc == 128 + signum, (rc, log.read_text()[-3000:])
    assert not left, left
