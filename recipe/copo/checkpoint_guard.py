"""Checkpoints that are complete or absent: a save is staged, sealed, renamed, then published.

verl 0.9.1 writes ``global_step_N`` in place, then truncates and rewrites the tracker file
``latest_checkpointed_iteration.txt``; its rotation (``trainer.max_actor_ckpt_to_keep``) deletes older
``actor/`` folders inside the actor worker, before the trainer has written the step's ``data.pt`` and
the tracker. So a kill or a full disk mid-save can leave a partial folder, an empty tracker (resume then
fails on ``int("")``), or no loadable checkpoint at all. :class:`CheckpointGuard` wraps verl's save
(``recipe/copo/trainer.py`` points it at the staging folder), in four stages:

1. **check**: the root must have room for one more checkpoint the size of the last complete one, else
   :class:`CheckpointSpaceError` before anything is written;
2. **stage**: verl writes into ``<root>/.partial/global_step_N`` (its own rotation switched off);
3. **seal**: a ``checkpoint_complete.json`` marker is written and fsynced last, and the folder is
   renamed to ``<root>/global_step_N`` (one rename: the folder is there complete or not at all);
4. **publish**: once the step's metrics line is in ``metrics.jsonl`` (so a resume never skips a logged
   step), the tracker is replaced atomically (temporary file, fsync, rename), then complete
   checkpoints beyond ``keep`` are deleted, oldest first, never the one just published.

A resume (:meth:`CheckpointGuard.prepare_resume`) drops what a crash left in ``.partial`` and, when the
tracker is missing, unreadable or names an incomplete folder, points it at the newest complete one.
A disk that fills mid-save (ENOSPC, or any save error on a filesystem left with no bytes or inodes:
torch's writer drops the errno) is cleaned of the partial folder and reported as
:class:`CheckpointSpaceError`, naming the path, the free space and the space a checkpoint needs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from recipe.files import atomic_write_text, fsync_dir

log = logging.getLogger(__name__)

STAGING_DIR = ".partial"
MARKER = "checkpoint_complete.json"
TRACKER = "latest_checkpointed_iteration.txt"  # verl's name (verl/utils/checkpoint/checkpoint_manager.py)
_STEP_RE = re.compile(r"^global_step_(\d+)$")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded")
# A write that failed for want of space leaves less than this free (it fills the disk to the last page).
FILLED_BYTES = 2**20


class CheckpointSpaceError(OSError):
    """The checkpoint root has no room for the next checkpoint; the message says where and how much."""


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"global_step_{step}"


def is_complete(folder: str | os.PathLike) -> bool:
    """A checkpoint folder that a resume may load: sealed by the guard (its marker is there) or, written
    before the guard existed, one whose ``data.pt`` (verl writes it after the actor's shards) and
    ``actor/`` are there."""
    folder = Path(folder)
    if (folder / MARKER).is_file():
        return True
    return (folder / "data.pt").is_file() and (folder / "actor").is_dir()


def complete_steps(root: str | os.PathLike) -> list[int]:
    """Steps of the complete ``global_step_N`` folders under ``root``, ascending."""
    root = Path(root)
    if not root.is_dir():
        return []
    steps = []
    for child in root.iterdir():
        match = _STEP_RE.match(child.name)
        if match and child.is_dir() and is_complete(child):
            steps.append(int(match.group(1)))
    return sorted(steps)


def read_tracker(root: str | os.PathLike) -> int | None:
    """The step the tracker names, or None when it is missing or does not hold one integer."""
    try:
        text = (Path(root) / TRACKER).read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def write_tracker(root: str | os.PathLike, step: int) -> None:
    """Replace the tracker atomically: a crash leaves the old content or the new, never an empty file."""
    atomic_write_text(Path(root) / TRACKER, str(step))


def dir_bytes(folder: str | os.PathLike) -> int:
    total = 0
    for base, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps: a Ray task error from a worker, a chained cause) is ENOSPC/EDQUOT."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_FULL:
            return True
        if any(text in str(current) for text in _DISK_FULL_TEXT):
            return True
        todo += [getattr(current, "cause", None), current.__cause__, current.__context__]
    return False


def is_filled(stat: os.statvfs_result) -> bool:
    """The filesystem has no room left for a write: under ``FILLED_BYTES`` free to unprivileged users, or
    no free inode (filesystems that report no inode count, as btrfs, are judged by bytes only)."""
    no_bytes = stat.f_blocks > 0 and stat.f_bavail * stat.f_frsize < FILLED_BYTES
    no_inodes = stat.f_files > 0 and stat.f_favail == 0
    return no_bytes or no_inodes


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


class CheckpointGuard:
    """Stages, seals and publishes the checkpoints of one run folder (see the module docstring).

    Args:
        root: ``trainer.default_local_dir``.
        keep: ``trainer.max_actor_ckpt_to_keep`` (None or <= 0: keep all).
    """

    def __init__(self, root: str | os.PathLike, keep: int | None) -> None:
        self.root = Path(root).absolute()
        self.keep = keep if keep and keep > 0 else None
        self.staging_root = self.root / STAGING_DIR
        self.pending: int | None = None  # sealed, not yet published

    # -- resume --------------------------------------------------------------------------------------
    def prepare_resume(self) -> int | None:
        """Make the tracker name the newest complete checkpoint it can; return that step (None: none)."""
        if self.staging_root.exists():
            log.warning(
                "removing %s: a save that never completed (the run was stopped mid-save)", self.staging_root
            )
            shutil.rmtree(self.staging_root, ignore_errors=True)
        named = read_tracker(self.root)
        if named is not None and is_complete(step_dir(self.root, named)):
            return named
        complete = complete_steps(self.root)
        if named is not None:
            complete = [s for s in complete if s <= named] or complete
        if not complete:
            if (self.root / TRACKER).exists():
                log.warning(
                    "%s names no complete checkpoint and none exists: training starts from scratch",
                    self.root / TRACKER,
                )
                (self.root / TRACKER).unlink()
            return None
        chosen = complete[-1]
        log.warning(
            "%s %s; resuming from the newest complete checkpoint, %s",
            self.root / TRACKER,
            "is missing or unreadable"
            if named is None
            else f"names global_step_{named}, which is incomplete",
            step_dir(self.root, chosen),
        )
        write_tracker(self.root, chosen)
        return chosen

    # -- save ------------------------------------------------------------------------------------------
    def _last_size(self) -> tuple[int, int] | None:
        steps = complete_steps(self.root)
        return (steps[-1], dir_bytes(step_dir(self.root, steps[-1]))) if steps else None

    def check_space(self, step: int) -> None:
        """Refuse to start a save that cannot fit (the last complete checkpoint stays until the new one is
        sealed and published, so the root must hold both)."""
        last = self._last_size()
        if last is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.root).free
        if free < last[1]:
            raise self.space_error(step, free=free, needed=last[1], last=last[0], before_writing=True)

    def space_error(
        self,
        step: int,
        *,
        free: int,
        needed: int | None,
        last: int | None,
        before_writing: bool = False,
        free_files: int | None = None,
        written: int | None = None,
    ) -> CheckpointSpaceError:
        """The error of a save that did not fit: where, how much was free, how much one needs, what to do.

        ``needed`` is the size of the last complete checkpoint (``last``); without one, ``written`` (what
        the failed save had written) is the lower bound it reports.
        """
        what = "was not started" if before_writing else "ran out of space and was removed"
        files = f" and room for {free_files} more files (inodes)" if free_files is not None else ""
        if needed is not None and last is not None:
            need = (
                f"a checkpoint needs about {_gib(needed)} (the size of global_step_{last}); the previous "
                "checkpoint is kept until a new one is complete, so the disk must hold both"
            )
            resume = (
                f"A relaunch with trainer.resume_mode=auto resumes from step {last} "
                f"({step_dir(self.root, last)}), which is intact."
            )
        else:
            need = "the run's first checkpoint needs more than " + (
                f"the {_gib(written)} it had written when the disk filled" if written else "that"
            )
            resume = "No earlier checkpoint exists: a relaunch starts from step 0."
        kept = f" (trainer.max_actor_ckpt_to_keep={self.keep} checkpoints are kept)" if self.keep else ""
        return CheckpointSpaceError(
            errno.ENOSPC,
            f"the checkpoint of step {step} {what}: {self.root} had {_gib(free)} free{files}; {need}. "
            f"Free space there, or set trainer.default_local_dir to a disk with room{kept}. {resume}",
        )

    def begin(self, step: int) -> Path:
        """The staging root verl is pointed at for this save (emptied first)."""
        if self.staging_root.exists():
            shutil.rmtree(self.staging_root)
        self.staging_root.mkdir(parents=True)
        return self.staging_root

    def abort(self, step: int, exc: BaseException) -> BaseException:
        """Remove the staged folder of a save that failed; return the error to raise.

        A save that failed on a full disk is a :class:`CheckpointSpaceError`, whether the writer said
        ENOSPC or not: ``torch.save``'s zip writer reports a short write as ``RuntimeError: [enforce fail
        at inline_container.cc] unexpected pos ...`` (or ``file write failed``), without the errno. So the
        filesystem itself is asked, before the staged files are removed: no bytes or no inodes left.
        """
        stat = os.statvfs(self.root)  # as the save left it: bytes and inodes (files) left
        free, free_files = stat.f_bavail * stat.f_frsize, stat.f_favail
        if not (is_disk_full(exc) or is_filled(stat)):
            shutil.rmtree(self.staging_root, ignore_errors=True)
            return exc
        written = dir_bytes(self.staging_root) if self.staging_root.exists() else 0
        shutil.rmtree(self.staging_root, ignore_errors=True)
        last = self._last_size()
        return self.space_error(
            step,
            free=free,
            needed=last[1] if last else None,
            last=last[0] if last else None,
            free_files=free_files,
            written=written,
        )

    def seal(self, step: int) -> Path:
        """Mark the staged step complete and move it into place; return its final folder."""
        staged = step_dir(self.staging_root, step)
        marker = {"step": step, "bytes": dir_bytes(staged), "sealed_at": time.time()}
        with open(staged / MARKER, "w") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
        final = step_dir(self.root, step)
        if final.exists():  # a sealed, never-published save of a run that was stopped: this one replaces it
            stale = self.staging_root / f"replaced_global_step_{step}"
            os.replace(final, stale)
        os.replace(staged, final)
        shutil.rmtree(self.staging_root, ignore_errors=True)
        fsync_dir(self.root)
        self.pending = step
        return final

    def publish(self) -> int | None:
        """Point the tracker at the sealed step, then rotate; return the published step (None: nothing)."""
        step, self.pending = self.pending, None
        if step is None:
            return None
        write_tracker(self.root, step)
        if self.keep is not None:
            older = [s for s in complete_steps(self.root) if s < step]
            for old in older[: max(0, len(older) - (self.keep - 1))]:
                log.info(
                    "removing %s (trainer.max_actor_ckpt_to_keep=%d)", step_dir(self.root, old), self.keep
                )
                shutil.rmtree(step_dir(self.root, old), ignore_errors=True)
        return step


def verl_save_overrides(staging_root: Path) -> dict[str, Any]:
    """The ``trainer.*`` values verl's ``_save_checkpoint`` must see while the guard runs it: write under
    the staging root, rotate nothing (the guard rotates after publishing)."""
    return {
        "default_local_dir": str(staging_root),
        "max_actor_ckpt_to_keep": None,
        "max_critic_ckpt_to_keep": None,
        "remove_previous_ckpt_in_save": False,
    }
