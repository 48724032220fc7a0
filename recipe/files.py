"""Folders written whole or not at all: a crash never leaves half a model behind.

Standard library only.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
