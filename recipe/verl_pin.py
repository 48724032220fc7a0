"""The one reader of ``recipe/copo/REQUIRED_VERL.txt``, the verl version this project is tested against.

Standard library only, so ``setup.py`` and ``scripts/cluster/check_env.py`` can load this file by
path (``importlib.util.spec_from_file_location``) before the project is installed. Readers:
``setup.py`` (the ``verl`` pins of both extras), ``recipe.copo.main_copo`` and ``recipe.cpu_backend``
(refuse another installed verl), ``scripts/cluster/check_env.py`` (every node), and the GPU image
(``python recipe/verl_pin.py`` prints the version).

The file holds ``#`` comments and one line ``verl==X.Y.Z``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["REQUIRED_VERL_FILE", "check_verl_version", "required_verl"]

REQUIRED_VERL_FILE = Path(__file__).resolve().parent / "copo" / "REQUIRED_VERL.txt"
_PIN = re.compile(r"verl==(\d+\.\d+\.\d+)")


def required_verl(path: Path | str = REQUIRED_VERL_FILE) -> str:
    """The pinned version ``X.Y.Z``: the first line that is not blank or a comment must be ``verl==X.Y.Z``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no verl pin file; run from a copo-verl checkout or installation")
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    first = next((line for line in lines if line), "")
    match = _PIN.fullmatch(first)
    if match is None:
        raise ValueError(f"{path}: the first non-comment line must be 'verl==X.Y.Z', got {first!r}")
    return match.group(1)


def check_verl_version(installed: str | None = None, path: Path | str = REQUIRED_VERL_FILE) -> str:
    """Raise RuntimeError unless the installed verl is the pinned one; returns the installed version.

    The recipe's trainer and loss and the CPU backend use verl internals (the v1 trainer's hooks,
    ``ppo_loss``, private registries), so any other version must fail before a job starts.
    """
    if installed is None:
        import verl

        installed = verl.__version__
    required = required_verl(path)
    if installed != required:
        raise RuntimeError(
            f"copo-verl supports verl=={required} only, but verl {installed} is installed (pin: {path}). "
            f"Fix: pip install 'verl=={required}' --no-deps (CPU: bash scripts/setup_env.sh; GPU: "
            "pip install -e '.[gpu]'), or port recipe/copo/trainer.py and recipe/cpu_backend to the new verl."
        )
    return installed


if __name__ == "__main__":
    print(required_verl(*sys.argv[1:2]))
