"""The flake check: the timing-, signal- and stop-sensitive tests, run again and again, launched as users
launch them on bad days, reporting every test that failed even once.

    bash scripts/flake_check.sh [--rounds 5] [--neighbours 2] [--out runs/flake_check] [-- PYTEST ARGS]

Two modes, ``--rounds`` times each, alternating:

- ``background``: pytest started from a background job (``nohup pytest ... &`` in a shell), so it
  inherits SIGINT and SIGQUIT as ignored (the log's header line says whether it did);
- ``busy``: pytest beside ``scripts/busy_machine.sh N`` spinning neighbours.

Each round writes a JUnit XML file; the summary (``summary.txt`` in ``--out`` and on stdout) lists, per
mode, the rounds, their wall time and load, and every test that failed or errored in any round. The
exit status is 1 when any did, else 0. Default: the tests of :data:`FLAKE_SET` (the default suite's
signal, stop, fault and timing tests); pytest arguments after ``--`` replace it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import SIGNALS_HEADER
from tests.paths import REPO

# The default suite's tests that send signals, stop process trees, inject faults or race the clock.
FLAKE_SET = [
    "tests/recipe/test_proc.py",
    "tests/recipe/quickstart/test_run.py",
    "tests/recipe/copo/test_driver_signals.py",
    "tests/recipe/copo/test_failures.py",
    "tests/recipe/evaluation/test_stop.py",
    "tests/faults/test_eval_faults.py",
    "tests/scripts/test_busy_machine.py",
    "tests/scripts/test_static_cluster.py::test_a_stop_signal_stops_the_submitted_job",
    "tests/scripts/test_static_cluster.py::test_head_submit_stop_round_trip",
    "tests/scripts/test_static_cluster.py::test_blocking_head_stops_with_its_owner",
    "tests/scripts/test_static_shell.py::test_default_signals_gives_a_background_launch_the_default_sigint",
    "tests/recipe/study/test_driver.py",
]
MODES = ("background", "busy")


@dataclass
class Round:
    """One pytest run: its mode, number, outcome per test id, wall time and load."""

    mode: str
    number: int
    outcomes: dict[str, str] = field(default_factory=dict)  # test id -> passed / failed / error / skipped
    wall_s: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # 1-min load average at the start and at the end
    launched_ignoring_sigint: bool | None = None
    returncode: int = 0


def read_junit(path: Path) -> dict[str, str]:
    """Outcome per test id (``file::name``) from a pytest JUnit XML file."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        test_id = f"{classname.replace('.', '/')}.py::{name}" if classname else name
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        outcomes[test_id] = outcome
    return outcomes


def round_command(mode: str, pytest_args: Sequence[str], junit: Path, log: Path, neighbours: int) -> list[str]:
    """The shell command of one round (run with ``bash -c``; the log gets pytest's output)."""
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", *pytest_args]
    quoted = " ".join(_quote(a) for a in pytest)
    if mode == "background":
        # `&` in a non-interactive shell (and nohup) hands pytest SIGINT/SIGQUIT ignored, as a user's
        # script or scheduler does; `wait $!` gives back its exit status.
        return ["bash", "-c", f"nohup {quoted} > {_quote(str(log))} 2>&1 & wait $!"]
    if mode == "busy":
        busy = _quote(str(REPO / "scripts" / "busy_machine.sh"))
        return ["bash", "-c", f"bash {busy} {neighbours} {quoted} > {_quote(str(log))} 2>&1"]
    raise ValueError(f"unknown mode {mode!r}: choose from {MODES}")


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def run_round(mode: str, number: int, pytest_args: Sequence[str], out: Path, neighbours: int) -> Round:
    """Run one round and read its results (a round whose pytest wrote no XML counts as one error)."""
    junit, log = out / f"{mode}-{number}.xml", out / f"{mode}-{number}.log"
    result = Round(mode, number)
    load0 = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.run(round_command(mode, pytest_args, junit, log, neighbours), cwd=REPO)
    result.wall_s = time.monotonic() - started
    result.load = (load0, os.getloadavg()[0])
    result.returncode = proc.returncode
    text = log.read_text(errors="replace") if log.is_file() else ""
    for line in text.splitlines():
        if line.startswith(SIGNALS_HEADER):
            result.launched_ignoring_sigint = line[len(SIGNALS_HEADER) :].startswith("True")
    result.outcomes = read_junit(junit) if junit.is_file() else {f"<{mode} round {number}: no results>": "error"}
    return result


def summarize(rounds: Sequence[Round]) -> tuple[str, bool]:
    """The report and whether every test passed in every round (skips are not failures)."""
    lines, clean = [], True
    for mode in MODES:
        mine = [r for r in rounds if r.mode == mode]
        if not mine:
            continue
        failed = Counter(t for r in mine for t, o in r.outcomes.items() if o in ("failed", "error"))
        tests = len({t for r in mine for t in r.outcomes})
        lines.append(f"{mode}: {len(mine)} rounds, {tests} tests each, {sum(failed.values())} failures")
        for r in mine:
            n_failed = sum(o in ("failed", "error") for o in r.outcomes.values())
            ignored = "" if r.launched_ignoring_sigint is None else f", started with SIGINT ignored: {r.launched_ignoring_sigint}"
            lines.append(
                f"  round {r.number}: {n_failed} failed of {len(r.outcomes)}, {r.wall_s / 60:.1f} min, "
                f"load {r.load[0]:.1f} -> {r.load[1]:.1f}{ignored}"
            )
        for test, times in sorted(failed.items()):
            lines.append(f"  FAILED {times}/{len(mine)}: {test}")
        clean = clean and not failed
    lines.append("flake check: " + ("0 failures" if clean else "FAILURES (see above)"))
    return "\n".join(lines), clean


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash scripts/flake_check.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per mode (default: 5)")
    parser.add_argument("--neighbours", type=int, default=2, help="busy neighbours in the busy mode (default: 2)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated (default: background,busy)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "flake_check", help="default: runs/flake_check")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest arguments (default: the flake set)")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if args.rounds < 1 or not set(modes) <= set(MODES):
        parser.error(f"--rounds must be >= 1 and --modes a subset of {','.join(MODES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    pytest_args = args.pytest_args or FLAKE_SET
    rounds = []
    for number in range(1, args.rounds + 1):
        for mode in modes:
            print(f"[flake] {mode} round {number}/{args.rounds} ...", flush=True)
            rounds.append(run_round(mode, number, pytest_args, args.out, args.neighbours))
            report, _ = summarize(rounds)
            (args.out / "summary.txt").write_text(report + "\n")  # a stopped check keeps what it ran
            print(report.splitlines()[-1] if rounds[-1].returncode == 0 else report, flush=True)
    report, clean = summarize(rounds)
    print(report)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
