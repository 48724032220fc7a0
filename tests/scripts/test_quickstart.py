"""scripts/quickstart.sh argument handling and scripts/venv_ready.sh (no training).

The quickstart's Python side is tested where it lives: tests/recipe/quickstart/.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def test_help_and_bad_arguments() -> None:
    ok = subprocess.run(["bash", "scripts/quickstart.sh", "--help"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0 and "--steps N" in ok.stdout and "--algo NAME" in ok.stdout
    bad = subprocess.run(
        ["bash", "scripts/quickstart.sh", "--bogus"], cwd=REPO, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "unknown argument '--bogus'" in bad.stderr
    algo = subprocess.run(
        ["bash", "scripts/quickstart.sh", "--algo", "ppo"], cwd=REPO, capture_output=True, text=True
    )
    assert algo.returncode == 2 and "--algo must be copo or grpo" in algo.stderr


def test_venv_ready_finds_the_packages_and_misses_them_without_site_packages(tmp_path: Path) -> None:
    """scripts/venv_ready.sh decides whether quickstart.sh / study_cpu.sh run setup_env.sh."""

    def ready(python: str) -> bool:
        cmd = f"source scripts/venv_ready.sh && venv_ready {shlex.quote(python)}"
        return subprocess.run(["bash", "-c", cmd], cwd=REPO).returncode == 0

    assert ready(sys.executable)
    bare = tmp_path / "python-without-site-packages"
    bare.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')  # -S: no site-packages
    bare.chmod(0o755)
    assert not ready(str(bare))
    assert not ready(str(tmp_path / "no-such-python"))
