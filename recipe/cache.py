"""The project's cache folder: converted models, generated data, the testbed (``$COPO_CACHE``).

Standard library only. The shell launchers read the same variable with the same default
(``${COPO_CACHE:-$HOME/.cache/copo-verl}`` in ``scripts/quickstart.sh`` and ``scripts/study_cpu.sh``)
and export it, so a Python process they start resolves the same folder.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "COPO_CACHE"


def cache_root() -> Path:
    """``$COPO_CACHE``, or ``~/.cache/copo-verl`` when it is unset or empty."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "copo-verl")
