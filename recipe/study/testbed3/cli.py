"""``scripts/study_testbed3.py``: the testbed v3 study (docs/STUDY_PLAN.md, "Amendment: testbed v3").

    study_testbed3.py build              # testbed v3: v2's policy + a noisy SFT continuation, re-split data (cached)
    study_testbed3.py levels             # greedy vs sampled accuracy per level, v2 and v3 -> docs/study_cpu/testbed3/levels.csv
    study_testbed3.py tune               # the learning-rate grid on the tuning seeds (fast trainer)
    study_testbed3.py pilot              # the primary pair on the pilot seeds at the tuned rates
    study_testbed3.py pilot-summarize    # -> pilot_runs.csv, learning_rates.json, the plan's tuning/power blocks
    study_testbed3.py run                # the confirmatory runs (refused unless the plan and rates are committed)
    study_testbed3.py real               # the confirmation through verl's trainer (main_copo)
    study_testbed3.py summarize          # runs -> CSVs -> report, plots and the docs' generated blocks

Every phase is resumable (finished runs are skipped), two runs at a time, one thread each; SIGTERM or
Ctrl-C stops every run it started. ``--dry-run`` prints the plan. Runs live in
``runs/study_testbed3/<phase>/`` (ignored by git).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from recipe.files import REPO_ROOT
from recipe.launch import format_overrides
from recipe.study.common import jobs as study_jobs
from recipe.study.machine import MACHINE_LOG, committed, record_machine
from recipe.study.testbed.build import Testbed, ensure_testbed, locate_testbed
from recipe.study.testbed3 import plan

RUNS = REPO_ROOT / "runs" / "study_testbed3"
DOCS = REPO_ROOT / "docs" / "study_cpu" / "testbed3"
PLAN_DOC = REPO_ROOT / "docs" / "STUDY_PLAN.md"
DOC_PREFIX = "testbed3/"


def testbed(dry_run: bool = False) -> Testbed:
    return locate_testbed(plan.TESTBED_V3) if dry_run else ensure_testbed(plan.TESTBED_V3)


def _run(
    jobs: list[Any],
    args: argparse.Namespace,
    testbed_: Testbed,
    phase: str,
    start_before: float | None = None,
) -> int:
    from recipe.study.driver import run_jobs

    print(f"[study] {phase}: {len(jobs)} runs", flush=True)
    if not args.dry_run:
        record_machine(args.runs, testbed_, f"{phase} start")
    failures = run_jobs(jobs, args.parallel, dry_run=args.dry_run, start_before=start_before)
    if not args.dry_run:
        record_machine(args.runs, testbed_, f"{phase} end")
    return 1 if failures else 0


def _fast(t: Testbed, todo: list[tuple[str, int, float]], runs: Path, name_lr: bool = False) -> list[Any]:
    return study_jobs.fast_jobs(t, todo, runs, name_lr=name_lr, config_name=plan.CONFIG_NAME)


def cmd_build(args: argparse.Namespace) -> int:
    t = testbed()
    manifest = t.manifest()
    print(
        f"[testbed3] {t.key}: continued from {manifest['base']}, {manifest['val_problems']} validation and "
        f"{manifest['train_problems']} training problems, SFT {manifest['build_seconds']:.0f} s"
    )
    print(t.root)
    return 0


def cmd_levels(args: argparse.Namespace) -> int:
    from recipe.study.common.testbeds import TESTBED_V2
    from recipe.study.testbed3 import levels

    t = testbed()
    base = ensure_testbed(TESTBED_V2)
    rows = []
    for name, tb in (("v2 (base)", base), ("v3", t)):
        rows += levels.measure(tb.model, t.data / "val.parquet", name)
    levels.write(rows, args.docs / "levels.csv")
    import pandas as pd

    print(levels.levels_markdown(pd.read_csv(args.docs / "levels.csv")))
    return 0


def tuning_plan() -> list[tuple[str, int, float]]:
    return study_jobs.interleave(plan.METHODS, plan.TUNING_SEEDS, {m: plan.LR_GRID for m in plan.METHODS})


def cmd_tune(args: argparse.Namespace) -> int:
    t = testbed(args.dry_run)
    return _run(_fast(t, tuning_plan(), args.runs / "tuning", name_lr=True), args, t, "tuning")


def cmd_pilot(args: argparse.Namespace) -> int:
    t = testbed(args.dry_run)
    rates = plan.learning_rates()
    todo = study_jobs.interleave(
        plan.PILOT_METHODS, plan.PILOT_SEEDS, {m: [rates[m]] for m in plan.PILOT_METHODS}
    )
    return _run(_fast(t, todo, args.runs / "pilot"), args, t, "pilot")


def cmd_run(args: argparse.Namespace) -> int:
    for path in (PLAN_DOC, plan.LEARNING_RATES_FILE):
        if not args.dry_run and not committed(path):
            raise SystemExit(
                f"study_testbed3.py run: {path} is not committed as it is; the plan and the tuned learning rates "
                "must be in git history before any confirmatory run (docs/STUDY_PLAN.md)"
            )
    t = testbed(args.dry_run)
    rates = plan.learning_rates()
    todo = study_jobs.interleave(plan.METHODS, plan.CONFIRMATORY_SEEDS, {m: [rates[m]] for m in plan.METHODS})
    jobs = _fast(t, todo, args.runs / "confirmatory")
    deadline = datetime.fromisoformat(plan.CONFIRMATORY_DEADLINE_UTC).timestamp()
    return _run(jobs, args, t, "confirmatory", start_before=deadline)


def cmd_real(args: argparse.Namespace) -> int:
    t = testbed(args.dry_run)
    rates = plan.learning_rates()
    todo = study_jobs.interleave(
        plan.REAL_TRAINER_METHODS, plan.REAL_TRAINER_SEEDS, {m: [rates[m]] for m in plan.REAL_TRAINER_METHODS}
    )
    steps = study_jobs.planned_steps(None, plan.CONFIG_NAME)
    # validation at step 0 and after the last step only: verl's sampling of 4 x 1024 answers is minutes
    extra = format_overrides({"trainer.test_freq": steps, "trainer.logger": ["console"]})
    jobs = study_jobs.real_jobs(t, todo, args.runs / "real", extra=extra, config_name=plan.CONFIG_NAME)
    return _run(jobs, args, t, "real")


def planned_runs(runs: Path, rates: dict[str, float] | None) -> list[Any]:
    """Every finished run of every phase, as ``collect.PlannedRun`` (phases not run yet are skipped)."""
    from recipe.study.common.collect import PlannedRun
    from recipe.study.driver import SUMMARY

    out = [
        PlannedRun("tuning", "fast", m, s, lr, runs / "tuning" / study_jobs.run_name(m, s, lr))
        for m, s, lr in tuning_plan()
    ]
    if rates is not None:
        phases = (
            ("pilot", "fast", plan.PILOT_METHODS, plan.PILOT_SEEDS),
            ("confirmatory", "fast", plan.METHODS, plan.CONFIRMATORY_SEEDS),
            ("real", "main_copo", plan.REAL_TRAINER_METHODS, plan.REAL_TRAINER_SEEDS),
        )
        for phase, trainer, methods, seeds in phases:
            for m, s, lr in study_jobs.interleave(methods, seeds, {m: [rates[m]] for m in methods}):
                out.append(PlannedRun(phase, trainer, m, s, lr, runs / phase / study_jobs.run_name(m, s)))
    return [r for r in out if (r.path / SUMMARY).is_file()]


def write_machine_csv(runs: Path, docs: Path) -> None:
    """``machine.csv``: each phase's start and end as a UTC time (to the second), speed and load."""
    from datetime import timezone

    from recipe.study.steps import write_csv

    log = runs / MACHINE_LOG
    if log.is_file():
        rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        for row in rows:
            row["time"] = datetime.fromtimestamp(row["time"], timezone.utc).isoformat(timespec="seconds")
        write_csv(docs / "machine.csv", rows, ["time", "when", "gflops", "load1"])


def complete_seeds(runs: list[Any]) -> list[Any]:
    """The runs of the seeds whose runs of every method finished, per phase (the plan's time-based stop)."""
    methods = {"confirmatory": set(plan.METHODS), "real": set(plan.REAL_TRAINER_METHODS)}
    done: dict[tuple[str, int], set[str]] = {}
    for r in runs:
        done.setdefault((r.phase, r.seed), set()).add(r.method)
    keep = [r for r in runs if done[(r.phase, r.seed)] >= methods[r.phase]]
    dropped = sorted({f"{r.phase} seed {r.seed}" for r in runs} - {f"{r.phase} seed {r.seed}" for r in keep})
    if dropped:
        print(f"[study] left out (not every method finished before the deadline): {', '.join(dropped)}")
    return keep


def _collect(runs: list[Any], problems: Any, docs: Path, prefix: str = "") -> None:
    from recipe.study.common import collect

    collect.collect(
        runs, problems, docs, prefix=prefix, source_prefix=plan.SOURCE_PREFIX, block_steps=plan.BLOCK_STEPS
    )


def cmd_pilot_summarize(args: argparse.Namespace) -> int:
    import pandas as pd

    from recipe.study.common import collect, docs
    from recipe.study.testbed3 import report

    t = testbed()
    problems = collect.validation_problems(t.data / "val.parquet")
    tuning = [r for r in planned_runs(args.runs, None) if r.phase == "tuning"]
    if len(tuning) < len(tuning_plan()):
        raise SystemExit(
            f"pilot-summarize: {len(tuning)} of {len(tuning_plan())} tuning runs finished; run `tune` first"
        )
    rates = plan.learning_rates() if plan.LEARNING_RATES_FILE.is_file() else None
    _collect(
        [r for r in planned_runs(args.runs, rates) if r.phase in ("tuning", "pilot")],
        problems,
        args.docs,
        "pilot_",
    )
    chosen = report.choose_learning_rates(
        pd.read_csv(args.docs / "pilot_runs.csv").query("phase == 'tuning'")
    )
    if rates is not None and rates != chosen:
        raise SystemExit(f"{plan.LEARNING_RATES_FILE} holds {rates}, the tuning runs choose {chosen}")
    plan.LEARNING_RATES_FILE.write_text(
        json.dumps({"rule": report.RATE_RULE, "learning_rates": chosen}, indent=2) + "\n"
    )
    write_machine_csv(args.runs, args.docs)
    fragments = report.report(args.docs)
    docs.update_docs(fragments, prefix=DOC_PREFIX)
    print("\n".join(fragments.get(k, "") for k in ("tuning", "tuning_gain", "pilot")))
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    from recipe.study.common import collect, docs
    from recipe.study.testbed3 import plots, report

    t = testbed()
    problems = collect.validation_problems(t.data / "val.parquet")
    rates = plan.learning_rates()
    runs = complete_seeds([r for r in planned_runs(args.runs, rates) if r.phase in ("confirmatory", "real")])
    if runs:
        _collect(runs, problems, args.docs)
        plots.plot_all(args.docs)
    write_machine_csv(args.runs, args.docs)
    fragments = report.report(args.docs)
    (args.docs / "summary.md").write_text(report.summary_markdown(fragments))
    docs.update_docs(fragments, prefix=DOC_PREFIX)
    print(report.summary_markdown(fragments))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="study_testbed3.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build", help="build (or find) testbed v3; prints its folder last")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--runs", type=Path, default=RUNS, help="run folders (one subfolder per phase)")
    common.add_argument("--docs", type=Path, default=DOCS, help="committed CSVs and report")
    sub.add_parser(
        "levels", parents=[common], help="greedy vs sampled accuracy per level (v2 and v3 policies)"
    )
    for name, text in (
        ("tune", "learning-rate grid on the tuning seeds"),
        ("pilot", "primary pair on the pilot seeds"),
        ("run", "confirmatory runs"),
        ("real", "verl-trainer confirmation"),
    ):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("--parallel", type=int, default=2, help="runs at once, one thread each")
        p.add_argument("--dry-run", action="store_true", help="print the plan and commands only")
    sub.add_parser("pilot-summarize", parents=[common], help="tuning + pilot -> learning rates and power")
    sub.add_parser("summarize", parents=[common], help="CSVs, report, plots, docs blocks")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {
        "build": cmd_build,
        "levels": cmd_levels,
        "tune": cmd_tune,
        "pilot": cmd_pilot,
        "pilot-summarize": cmd_pilot_summarize,
        "run": cmd_run,
        "real": cmd_real,
        "summarize": cmd_summarize,
    }
    from recipe.study.driver import dispatch

    return dispatch(commands, args.action, args)
