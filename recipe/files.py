"""Files and folders written whole or not at all, and where the checkout is.

- ``atomic_file`` / ``atomic_write_text``: a file written to a temporary sibling, fsynced, renamed
  over the target, and the folder fsynced: a crash leaves the old content or the new, never half.
- ``atomic_dir``: the same for a folder (a model, a tokenizer): a crash never leaves half a model.
- ``REPO_ROOT``: the checkout's root folder (the working folder of launched runs, ``docs/``, ``runs/``).

Standard library only.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

# recipe/files.py -> the checkout (an editable install; the set-up installs the project so).
REPO_ROOT = Path(__file__).resolve().parents[1]


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (a rename into it) to disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_file(
    path: str | os.PathLike[str], mode: str = "w", *, encoding: str | None = None, newline: str | None = None
) -> Iterator[IO[Any]]:
    """A file that replaces ``path`` only when the block ends normally.

    Yields a file opened with ``mode`` (``"w"``: text, UTF-8 unless ``encoding`` says otherwise;
    ``"wb"``: binary) on a temporary sibling ``.<name>.<random>.tmp`` (same file system, mode 0666
    less the umask, as a plain ``open`` would make it). When the block ends normally the file is
    flushed and fsynced, renamed over ``path`` in one ``os.replace``, and the folder is fsynced;
    when it raises, the temporary file is removed and ``path`` is left as it was. Parent folders
    are created.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file: mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if mode == "wb":
            f = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", encoding=encoding or "utf-8", newline=newline)
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` through ``atomic_file``: the old content or the new, never half."""
    with atomic_file(path, "w", encoding=encoding) as f:
        f.write(text)


@contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Write a folder under a temporary sibling name, then rename it to ``target``.

    Yields the temporary folder (``.<name>.tmp-XXXX`` next to ``target``, on the same file system).
    When the block ends normally, the folder is made world-readable (``mkdtemp`` makes it private),
    an existing ``target`` is removed and the temporary folder takes its name in one ``os.replace``.
    When the block raises, the temporary folder is removed and ``target`` is left as it was.

    Usage::

        with atomic_dir(out) as tmp:
            model.save_pretrained(tmp)
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
