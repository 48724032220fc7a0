"""The checkpoint guard's file rules, on plain folders (the real trainer's saves: tests/faults/)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from recipe.copo import checkpoint_guard as cg
from recipe.copo.checkpoint_guard import CheckpointGuard, CheckpointSpaceError


def fake_save(guard: CheckpointGuard, step: int, size: int = 1000) -> Path:
    """What verl's _save_checkpoint writes, under the staging root the guard hands it."""
    staging = guard.begin(step)
    folder = staging / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"m" * size)
    (folder / "data.pt").write_bytes(b"d")
    (staging / cg.TRACKER).write_text(str(step))  # verl writes its tracker there: never the real one
    return folder


def test_save_is_invisible_until_sealed_and_the_tracker_moves_only_on_publish(tmp_path: Path) -> None:
    guard = CheckpointGuard(tmp_path, keep=None)
    fake_save(guard, 1)
    assert cg.complete_steps(tmp_path) == [] and cg.read_tracker(tmp_path) is None
    guard.seal(1)
    assert cg.complete_steps(tmp_path) == [1] and not (tmp_path / cg.STAGING_DIR).exists()
    assert cg.read_tracker(tmp_path) is None and guard.pending == 1
    assert guard.publish() == 1 and cg.read_tracker(tmp_path) == 1 and guard.pending is None
    assert guard.publish() is None


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_rotation_runs_after_publishing_and_keeps_the_newest(tmp_path: Path, keep: int) -> None:
    guard = CheckpointGuard(tmp_path, keep=keep)
    for step in range(1, 6):
        fake_save(guard, step)
        guard.seal(step)
        # sealed, not published: every earlier complete checkpoint is still there
        assert cg.complete_steps(tmp_path)[-min(step, keep + 1) :] == list(
            range(max(1, step - keep), step + 1)
        )
        guard.publish()
        assert cg.complete_steps(tmp_path) == list(range(max(1, step - keep + 1), step + 1))
    assert cg.read_tracker(tmp_path) == 5


def test_a_failed_save_leaves_the_previous_checkpoint_and_tracker(tmp_path: Path) -> None:
    guard = CheckpointGuard(tmp_path, keep=1)
    fake_save(guard, 1)
    guard.seal(1)
    guard.publish()
    fake_save(guard, 2)
    error = guard.abort(2, OSError(errno.ENOSPC, "No space left on device"))
    assert isinstance(error, CheckpointSpaceError)
    assert str(tmp_path) in str(error) and "needs about" in str(error) and "global_step_1" in str(error)
    assert "resumes from step 1" in str(error)
    assert not (tmp_path / cg.STAGING_DIR).exists()
    assert cg.complete_steps(tmp_path) == [1] and cg.read_tracker(tmp_path) == 1
    other = RuntimeError("boom")
    assert guard.abort(2, other) is other  # not a disk problem: re-raised as it is


def statvfs(*, bytes_free: int, inodes_free: int, inodes: int = 1000) -> os.statvfs_result:
    """A statvfs result of a 1 GiB filesystem of 4 KiB blocks (inodes=0: one that reports no inodes)."""
    block = 4096
    blocks_free = bytes_free // block
    return os.statvfs_result(
        (block, block, 2**18, blocks_free, blocks_free, inodes, inodes_free, inodes_free, 0, 255)
    )


@pytest.mark.parametrize(
    ("stat", "full"),
    [
        (statvfs(bytes_free=8192, inodes_free=500), True),  # bytes gone
        (statvfs(bytes_free=2**29, inodes_free=0), True),  # inodes gone
        (statvfs(bytes_free=2**29, inodes_free=0, inodes=0), False),  # btrfs: no inode count
        (statvfs(bytes_free=2**29, inodes_free=500), False),
    ],
)
def test_a_writer_error_on_a_filled_disk_is_a_space_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stat: os.statvfs_result, full: bool
) -> None:
    """torch.save's zip writer reports a short write without ENOSPC; the filesystem says it is full."""
    guard = CheckpointGuard(tmp_path, keep=1)
    fake_save(guard, 1)
    monkeypatch.setattr(cg.os, "statvfs", lambda path: stat)
    torch_error = RuntimeError(
        "[enforce fail at inline_container.cc:672] . unexpected pos 24681600 vs 24681488"
    )
    error = guard.abort(1, torch_error)
    assert isinstance(error, CheckpointSpaceError) is full
    if full:
        text = str(error)
        assert f"the checkpoint of step 1 ran out of space and was removed: {tmp_path} had" in text
        assert "the run's first checkpoint needs more than the" in text and "when the disk filled" in text
        assert "No earlier checkpoint exists: a relaunch starts from step 0" in text
    else:
        assert error is torch_error
    assert not (tmp_path / cg.STAGING_DIR).exists()


def test_check_space_refuses_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guard = CheckpointGuard(tmp_path, keep=1)
    guard.check_space(1)  # nothing saved yet: no estimate, no refusal
    fake_save(guard, 1, size=5000)
    guard.seal(1)
    guard.publish()
    size = cg.dir_bytes(tmp_path / "global_step_1")
    usage = type("Usage", (), {"free": size - 1})
    monkeypatch.setattr(cg.shutil, "disk_usage", lambda path: usage)
    with pytest.raises(CheckpointSpaceError, match="was not started") as err:
        guard.check_space(2)
    assert err.value.errno == errno.ENOSPC and str(tmp_path) in str(err.value)
    usage.free = size
    guard.check_space(2)


def test_resume_skips_partial_folders_and_repairs_the_tracker(tmp_path: Path) -> None:
    guard = CheckpointGuard(tmp_path, keep=None)
    for step in (1, 2):
        fake_save(guard, step)
        guard.seal(step)
        guard.publish()
    fake_save(guard, 3)  # killed mid-save: staged, never sealed
    (tmp_path / "global_step_4" / "actor").mkdir(parents=True)  # a partial folder written in place (old verl)
    (tmp_path / cg.TRACKER).write_text("")  # truncated by an old, non-atomic tracker write
    assert CheckpointGuard(tmp_path, keep=None).prepare_resume() == 2
    assert cg.read_tracker(tmp_path) == 2 and not (tmp_path / cg.STAGING_DIR).exists()
    (tmp_path / cg.TRACKER).write_text("4")  # names the partial folder: the newest complete one before it
    assert CheckpointGuard(tmp_path, keep=None).prepare_resume() == 2
    assert cg.read_tracker(tmp_path) == 2
    (tmp_path / cg.TRACKER).write_text("2")
    assert CheckpointGuard(tmp_path, keep=None).prepare_resume() == 2


def test_resume_with_nothing_complete_starts_fresh(tmp_path: Path) -> None:
    (tmp_path / "global_step_1" / "actor").mkdir(parents=True)
    (tmp_path / cg.TRACKER).write_text("1")
    assert CheckpointGuard(tmp_path, keep=None).prepare_resume() is None
    assert not (tmp_path / cg.TRACKER).exists()


def test_a_sealed_but_unpublished_folder_is_replaced_by_the_next_save_of_its_step(tmp_path: Path) -> None:
    guard = CheckpointGuard(tmp_path, keep=None)
    fake_save(guard, 1, size=10)
    guard.seal(1)  # the run stopped before the step's metrics were logged: the tracker never named it
    fake_save(guard, 1, size=20)
    guard.seal(1)
    guard.publish()
    assert (tmp_path / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt").stat().st_size == 20


def test_tracker_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cg.write_tracker(tmp_path, 3)
    real_replace = os.replace

    def crash(src, dst):  # the process dies between writing the new file and renaming it
        raise KeyboardInterrupt

    monkeypatch.setattr(cg.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        cg.write_tracker(tmp_path, 4)
    monkeypatch.setattr(cg.os, "replace", real_replace)
    assert cg.read_tracker(tmp_path) == 3


def test_disk_full_is_found_inside_wrapped_errors() -> None:
    class RayTaskErrorLike(Exception):
        def __init__(self, cause: BaseException) -> None:
            super().__init__(f"ray::Worker.save_checkpoint() failed\n{cause!r}")
            self.cause = cause

    assert cg.is_disk_full(RayTaskErrorLike(OSError(errno.ENOSPC, "x")))
    assert cg.is_disk_full(RuntimeError("torch.save: [Errno 28] No space left on device"))
    try:
        try:
            raise OSError(errno.EDQUOT, "quota")
        except OSError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as outer:
        assert cg.is_disk_full(outer)
    assert not cg.is_disk_full(RuntimeError("CUDA out of memory"))
