"""scripts/test.sh builds .venv-vllm beside the suite: the vllm_cpu tests run last and wait for that build
(tests/vllm_cpu/conftest.py, venv.wait_for_build). These run in the regular suite, without vLLM."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.vllm_cpu import venv


def _pending(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, wait_s: float = 60) -> Path:
    rc = tmp_path / "rc"
    log = tmp_path / "build.log"
    log.write_text("".join(f"pip line {i}\n" for i in range(100)) + "ERROR: no matching distribution\n")
    monkeypatch.setattr(venv, "BUILD_RC", str(rc))
    monkeypatch.setattr(venv, "BUILD_LOG", str(log))
    monkeypatch.setattr(venv, "BUILD_WAIT_S", wait_s)
    return rc


def test_no_build_pending_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(venv, "BUILD_RC", None)
    assert venv.wait_for_build() is None


def test_waits_for_the_rc_file_then_passes_on_zero(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rc = _pending(monkeypatch, tmp_path)
    written = threading.Event()

    def finish() -> None:  # the build ends while the wait polls (written as test.sh does: rename into place)
        (tmp_path / "rc.part").write_text("0\n")
        (tmp_path / "rc.part").rename(rc)
        written.set()

    timer = threading.Timer(0.5, finish)
    timer.start()
    try:
        assert venv.wait_for_build() is None
        assert written.is_set()  # it returned only once the build had ended
    finally:
        timer.cancel()


def test_a_failed_build_is_reported_with_the_logs_tail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _pending(monkeypatch, tmp_path).write_text("1\n")
    problem = venv.wait_for_build()
    assert problem is not None
    assert "failed (rc 1" in problem and "setup_vllm_cpu.sh" in problem
    assert "ERROR: no matching distribution" in problem and "pip line 0\n" not in problem  # the tail only


def test_a_build_that_never_ends_is_a_failure_not_a_hang(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _pending(monkeypatch, tmp_path, wait_s=0.1)
    problem = venv.wait_for_build()
    assert problem is not None and "still ran after" in problem


def test_vllm_cpu_tests_are_collected_last() -> None:
    # the paper-config file (vLLM and non-vLLM tests) named first, a plain test file after it
    files = ["tests/vllm_cpu/test_vllm_paper_config.py", "tests/copo_core/test_metrics.py"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    vllm = [i for i, name in enumerate(ids) if "runs_a_step_with_vllm" in name]
    metrics = [i for i, name in enumerate(ids) if name.startswith("tests/copo_core/")]
    paper_plain = [i for i, name in enumerate(ids) if "paper_config" in name and i not in vllm]
    assert vllm and metrics and paper_plain, ids
    assert max(paper_plain) < min(metrics) and max(metrics) < min(vllm), ids
