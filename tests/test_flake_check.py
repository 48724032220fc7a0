"""tests/flake_check.py (scripts/flake_check.sh): it runs the rounds as it says and reports every test
that failed once, checked on a generated test that fails in one round only."""

from __future__ import annotations

from pathlib import Path

from tests import flake_check
from tests.paths import REPO

FLAKY = """
import os
from pathlib import Path

def test_steady():
    assert True

def test_fails_in_the_second_round_of_each_mode():
    counter = Path(os.environ["FLAKY_COUNTER"]) / os.environ.get("FLAKY_MODE", "x")
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    assert runs % 2 == 1
"""


def test_the_flake_set_names_files_that_exist() -> None:
    for entry in flake_check.FLAKE_SET:
        assert (REPO / entry.split("::")[0]).is_file(), entry


def test_a_test_that_fails_once_is_reported_in_each_mode(tmp_path: Path, monkeypatch, capsys) -> None:
    test_file = tmp_path / "test_flaky.py"
    test_file.write_text(FLAKY)
    monkeypatch.setenv("FLAKY_COUNTER", str(tmp_path))
    # one counter per mode: the modes alternate, and each must see its own second round fail
    real = flake_check.round_command
    monkeypatch.setattr(
        flake_check,
        "round_command",
        lambda mode, *a: ["env", f"FLAKY_MODE={mode}", *real(mode, *a)],
    )
    out = tmp_path / "out"
    rc = flake_check.main(
        ["--rounds", "2", "--neighbours", "1", "--out", str(out), "--", str(test_file), "-p", "tests.conftest"]
    )
    report = (out / "summary.txt").read_text()
    assert rc == 1, report
    for mode in flake_check.MODES:
        assert f"{mode}: 2 rounds, 2 tests each, 1 failures" in report
    assert report.count("FAILED 1/2: ") == 2 and "test_fails_in_the_second_round_of_each_mode" in report
    assert "test_steady" not in report
    # the background rounds really started with SIGINT ignored, as from a user's background job
    background = report.split("busy:")[0]
    assert background.count("started with SIGINT ignored: True") == 2, report
    assert "flake check: FAILURES" in capsys.readouterr().out


def test_a_clean_run_exits_zero(tmp_path: Path) -> None:
    test_file = tmp_path / "test_ok.py"
    test_file.write_text("def test_ok():\n    assert True\n")
    out = tmp_path / "out"
    rc = flake_check.main(["--rounds", "1", "--modes", "busy", "--neighbours", "1", "--out", str(out), "--", str(test_file)])
    assert rc == 0 and "flake check: 0 failures" in (out / "summary.txt").read_text()

