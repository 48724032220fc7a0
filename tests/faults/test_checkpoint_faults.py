"""Faults inside a checkpoint save (issue items 1 and 3): kill -9 mid-save, and a disk that fills.

* kill -9 of every process of the run while ``global_step_N`` is being written: the relaunch resumes from
  the last complete checkpoint, the partial folder is never loaded (it sits in ``.partial`` and is
  removed), the tracker file is never truncated, metrics.jsonl holds each step exactly once, and the
  resumed step trains the prompts the uninterrupted run trained at that step.
* a full disk, on a real tmpfs mounted as the checkpoint root (needs root: mount(2)): first out of inodes
  in the middle of writing a save (ENOSPC from the kernel mid-write), then too few bytes for the next
  save (refused before writing); each stops the run with an error naming the path and the space
  needed, the previous checkpoint stays loadable and is never rotated away
  (``trainer.max_actor_ckpt_to_keep=1``), and the relaunch after the disk is grown resumes.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from recipe.copo.checkpoint_guard import MARKER, STAGING_DIR, TRACKER, complete_steps, dir_bytes, read_tracker
from tests.faults.harness import RUN_TIMEOUT_S, Launched, batch, logged_steps, run_to_end, tiny_run
from tests.faults.records import record

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.timeout(3 * RUN_TIMEOUT_S)]


def assert_resumed(run, reference, log: str, resumed_from: int, upto: int) -> bool:
    """The relaunch loaded ``global_step_<resumed_from>``, trained the next steps once each, on the
    uninterrupted run's prompts; returns whether the next step's prompts matched."""
    assert f"resuming from {run.ckpt}/global_step_{resumed_from}" in log, log[-6000:]
    steps = logged_steps(run.metrics)
    assert steps == list(range(1, upto + 1)), f"metrics.jsonl must hold each step once: {steps}"
    assert read_tracker(run.ckpt) == upto and not (run.ckpt / STAGING_DIR).exists()
    same = batch(run.dumps, resumed_from + 1) == batch(reference.dumps, resumed_from + 1)
    assert same, f"step {resumed_from + 1} after the resume trained other prompts than the uninterrupted run"
    return same


def test_kill9_mid_save_resumes_from_the_last_complete_checkpoint(
    tmp_path: Path, fault_inputs, reference_run
) -> None:
    run = tiny_run(tmp_path / "run", fault_inputs)
    caught = None
    for attempt in range(3):  # a save is short: if the kill lands after it, the relaunch tries the next one
        launched = Launched(run.command(40), tmp_path / f"train{attempt}.log")
        try:
            launched.wait_for(lambda: len(logged_steps(run.metrics)) >= 1, "a logged step")
            step = max(logged_steps(run.metrics)) + 1
            staged = run.ckpt / STAGING_DIR / f"global_step_{step}" / "actor"
            launched.wait_for(staged.exists, f"the save of step {step}", poll_s=0.002)
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            launched.kill_all()
            stop_s, left = launched.stopped_after(t0, timeout=60)
        finally:
            launched.cleanup()
        assert not left, left
        if staged.exists() and not (run.ckpt / f"global_step_{step}").exists():
            caught = step
            break
    assert caught, "three saves in a row finished before the kill landed"
    before = logged_steps(run.metrics)
    # the tracker names the last published step, whole; the partial save is on disk, unsealed
    assert (run.ckpt / TRACKER).read_text() == str(caught - 1) and before == list(range(1, caught)), before
    partial = run.ckpt / STAGING_DIR / f"global_step_{caught}"
    assert partial.is_dir() and not (partial / MARKER).exists()
    assert complete_steps(run.ckpt) == list(range(1, caught))
    assert not (run.dumps / f"{caught}.jsonl").exists()

    resumed = run_to_end(run.command(caught + 1), tmp_path / "resume.log")
    assert resumed.rc == 0 and not resumed.left, resumed.log[-6000:]
    assert f"removing {partial.parent}" in resumed.log  # the partial save was dropped, never loaded
    same = assert_resumed(run, reference_run, resumed.log, resumed_from=caught - 1, upto=caught + 1)
    record(
        "1-kill9-mid-save",
        "kill -9 of the whole run while a checkpoint is written",
        f"SIGKILL to every process of main_copo the moment .partial/global_step_{caught}/actor appeared",
        stop_s=stop_s,
        steps_lost=max(before) - (caught - 1),
        processes_left=len(left),
        resumed_same_next_step=same,
        note="partial save dropped on resume; tracker whole; each step once in metrics.jsonl",
        load_1min=load,
    )


@contextmanager
def tmpfs(path: Path, *, size: int, inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes (and ``inodes`` inodes) mounted at ``path``; unmounted on exit."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}): the disk-full test needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, *, size: int, inodes: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size},nr_inodes={inodes}", str(path)], check=True)


def inodes_used(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_files - stat.f_ffree


def test_disk_full_during_a_save_keeps_the_last_checkpoint_and_resumes(
    tmp_path: Path, fault_inputs, reference_run
) -> None:
    mib = 2**20
    with tmpfs(tmp_path / "disk", size=4096 * mib) as disk:
        run = tiny_run(
            tmp_path / "run", fault_inputs, ckpt=disk / "ckpt", extra=["trainer.max_actor_ckpt_to_keep=1"]
        )

        # 1. inodes run out in the middle of writing step 2's checkpoint: ENOSPC from the kernel
        launched = Launched(run.command(40), tmp_path / "full.log")
        try:
            launched.wait_for(lambda: 1 in logged_steps(run.metrics), "step 1")
            ckpt_bytes = dir_bytes(run.ckpt / "global_step_1")
            per_save = sum(1 for _ in (run.ckpt / "global_step_1").rglob("*")) + 1
            # room for half of the next save's files and folders, then the kernel says ENOSPC
            remount(disk, size=4096 * mib, inodes=inodes_used(disk) + per_save // 2)
            load = os.getloadavg()[0]
            t_full = time.monotonic()
            launched.proc.wait(timeout=RUN_TIMEOUT_S)
            stop_s, left = launched.stopped_after(t_full, timeout=60)
        finally:
            launched.cleanup()
        text = launched.text()
        assert launched.proc.returncode != 0
        failed_step = max(logged_steps(run.metrics)) + 1
        assert f"the checkpoint of step {failed_step} ran out of space and was removed" in text, text[-6000:]
        assert (
            f"{run.ckpt} had" in text and "more files (inodes)" in text and "a checkpoint needs about" in text
        )
        assert not left, left
        kept = failed_step - 1
        assert (
            complete_steps(run.ckpt) == [kept] and read_tracker(run.ckpt) == kept
        )  # keep=1, never rotated early
        assert not (run.ckpt / STAGING_DIR).exists()  # the partial save was removed, its space given back
        ckpt_lost = max(logged_steps(run.metrics)) - kept
        record(
            "3a-disk-full-mid-save",
            "disk full in the middle of a checkpoint save",
            "tmpfs checkpoint root (root mount) left with inodes for half a save: ENOSPC mid-write",
            stop_s=stop_s,
            steps_lost=ckpt_lost,
            processes_left=len(left),
            resumed_same_next_step=None,
            note="CheckpointSpaceError names the path, free and needed space; keep=1 kept the last checkpoint",
            load_1min=load,
        )

        # 2. inodes back, but bytes for less than one more checkpoint: refused before writing anything
        stat = os.statvfs(disk)
        used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        remount(disk, size=used + ckpt_bytes // 2, inodes=100_000)
        small = run_to_end(run.command(40), tmp_path / "small.log")
        assert small.rc != 0 and not small.left, small.left
        assert f"the checkpoint of step {kept + 1} was not started" in small.log, small.log[-6000:]
        assert f"global_step_{kept}" in small.log and f"resumes from step {kept}" in small.log
        assert complete_steps(run.ckpt) == [kept] and read_tracker(run.ckpt) == kept
        assert logged_steps(run.metrics) == list(range(1, kept + 1))  # the refused step is not in the metrics

        # 3. space freed: the relaunch resumes from the checkpoint the full disk never touched
        remount(disk, size=4096 * mib, inodes=100_000)
        resumed = run_to_end(run.command(kept + 2), tmp_path / "resume.log")
        assert resumed.rc == 0 and not resumed.left, resumed.log[-6000:]
        same = assert_resumed(run, reference_run, resumed.log, resumed_from=kept, upto=kept + 2)
        assert complete_steps(run.ckpt) == [kept + 2], (
            "keep=1: the older checkpoints go once a newer is published"
        )
        record(
            "3b-disk-too-small",
            "disk too small for the next checkpoint",
            "tmpfs checkpoint root shrunk (remount) to half a checkpoint of free space",
            stop_s=small.clean_after_exit_s,
            steps_lost=0,
            processes_left=len(small.left),
            resumed_same_next_step=same,
            note="refused before writing (stop time: after the launcher's exit); the relaunch after growing the disk resumed",
        )


def test_a_disk_too_small_for_the_first_checkpoint_fails_that_save_cleanly(
    tmp_path: Path, fault_inputs
) -> None:
    """A 24 MiB tmpfs as the checkpoint root (a checkpoint of the fault model is ~110 MB): the first save
    runs out of bytes mid-write (ENOSPC from the kernel), with no earlier checkpoint to size it by."""
    mib = 2**20
    with tmpfs(tmp_path / "disk", size=24 * mib) as disk:
        run = tiny_run(tmp_path / "run", fault_inputs, ckpt=disk / "ckpt")
        launched = Launched(run.command(40), tmp_path / "small.log")
        try:
            staged = run.ckpt / STAGING_DIR / "global_step_1"
            launched.wait_for(staged.exists, "the save of step 1", poll_s=0.01)
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            launched.proc.wait(timeout=RUN_TIMEOUT_S)
            stop_s, left = launched.stopped_after(t0, timeout=60)
        finally:
            launched.cleanup()
        text = launched.text()
        assert launched.proc.returncode != 0 and not left, left
        assert "the checkpoint of step 1 ran out of space and was removed" in text, text[-6000:]
        assert f"{run.ckpt} had" in text and "when the disk filled" in text and "starts from step 0" in text
        assert not (run.ckpt / STAGING_DIR).exists() and complete_steps(run.ckpt) == []
        assert read_tracker(run.ckpt) is None
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        assert free > 20 * mib, f"the failed save's files were not removed: {free} bytes free"
    record(
        "3c-disk-too-small-first-save",
        "disk too small for even the first checkpoint",
        "a 24 MiB tmpfs (mount -t tmpfs -o size=24m) as the checkpoint root; a checkpoint is ~110 MB",
        stop_s=stop_s,
        steps_lost=max(logged_steps(run.metrics), default=0),
        processes_left=len(left),
        resumed_same_next_step=None,
        note="ENOSPC mid-write of step 1 (stop time from the start of that save): the partial save removed, its space given back; the error names the path",
        load_1min=load,
    )
