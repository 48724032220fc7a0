"""``scripts/study_testbed2.py``: the testbed v2 study (docs/STUDY_PLAN.md), phase by phase.

    study_testbed2.py build              # testbed v2: tokenizer, SFT policy, data (cached)
    study_testbed2.py census             # step-0 groups per task and level -> docs/study_cpu/testbed2/census.*
    study_testbed2.py tune               # the learning-rate grid on the tuning seeds (fast trainer)
    study_testbed2.py pilot              # the primary pair on the pilot seeds at the tuned rates
    study_testbed2.py pilot-summarize    # -> pilot_runs.csv, learning_rates.json, the plan's tuning/power fragments
    study_testbed2.py run                # the confirmatory runs (refused unless the plan and rates are committed)
    study_testbed2.py real               # the confirmation through verl's trainer (main_copo)
    study_testbed2.py explore            # the probes that tried to make v2 learn (exploration.py)
    study_testbed2.py summarize          # runs -> CSVs -> report, plots and the docs' generated fragments

Every phase is resumable (finished runs are skipped) and runs two at a time, one thread each; SIGTERM
or Ctrl-C stops every run it started. ``--dry-run`` prints the plan. Runs live in
``runs/study_testbed2/<phase>/`` (ignored by git).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from recipe.files import REPO_ROOT
from recipe.launch import format_overrides
from recipe.study.common import jobs as study_jobs
from recipe.study.machine import MACHINE_LOG, committed, record_machine
from recipe.study.testbed.build import Testbed, ensure_testbed, locate_testbed
from recipe.study.testbed2 import plan

RUNS = REPO_ROOT / "runs" / "study_testbed2"
DOCS = REPO_ROOT / "docs" / "study_cpu" / "testbed2"
PLAN_DOC = REPO_ROOT / "docs" / "STUDY_PLAN.md"


def testbed(dry_run: bool = False) -> Testbed:
    return locate_testbed(plan.TESTBED_V2) if dry_run else ensure_testbed(plan.TESTBED_V2)


def _run(jobs: list[Any], args: argparse.Namespace, runs: Path, testbed_: Testbed, phase: str) -> int:
    from recipe.study.driver import run_jobs

    print(f"[study] {phase}: {len(jobs)} runs in {runs}", flush=True)
    if not args.dry_run:
        record_machine(RUNS, testbed_, f"{phase} start")
    failures = run_jobs(jobs, args.parallel, dry_run=args.dry_run)
    if not args.dry_run:
        record_machine(RUNS, testbed_, f"{phase} end")
    return 1 if failures else 0


def cmd_build(args: argparse.Namespace) -> int:
    t = testbed()
    manifest = t.manifest()
    print(
        f"[testbed2] {t.key}: {manifest['parameters'] / 1e6:.2f}M parameters, SFT {manifest['build_seconds']:.0f} s"
    )
    print(t.root)
    return 0


def composed(t: Testbed, method: str, seed: int, lr: float) -> Any:
    from recipe.copo.config_check import compose_and_validate

    return compose_and_validate(study_jobs.overrides(t, method, seed, lr), config_name=plan.CONFIG_NAME)


def cmd_census(args: argparse.Namespace) -> int:
    from recipe.study.census import census_markdown
    from recipe.study.testbed2.census import run_census

    t = testbed()
    rows = run_census(
        composed(t, plan.BASELINE, args.seed, plan.LR_GRID[0]), args.per_task, args.seed, args.docs
    )
    print(census_markdown(rows))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    t = testbed(args.dry_run)
    runs = args.runs / "tuning"
    grid = study_jobs.interleave(plan.METHODS, plan.TUNING_SEEDS, {m: plan.LR_GRID for m in plan.METHODS})
    return _run(study_jobs.fast_jobs(t, grid, runs, name_lr=True), args, runs, t, "tuning")


def cmd_pilot(args: argparse.Namespace) -> int:
    t = testbed(args.dry_run)
    rates = plan.learning_rates()
    runs = args.runs / "pilot"
    todo = study_jobs.interleave(
        plan.PILOT_METHODS, plan.PILOT_SEEDS, {m: [rates[m]] for m in plan.PILOT_METHODS}
    )
    return _run(study_jobs.fast_jobs(t, todo, runs), args, runs, t, "pilot")


def cmd_run(args: argparse.Namespace) -> int:
    if plan.CONFIRMATORY_STOPPED:
        raise SystemExit(
            "study_testbed2.py run: the confirmatory phase of this plan was stopped (docs/STUDY_PLAN.md, status); "
            "a new study needs a new plan"
        )
    for path in (PLAN_DOC, plan.LEARNING_RATES_FILE):
        if not args.dry_run and not committed(path):
            raise SystemExit(
                f"study_testbed2.py run: {path} is not committed as it is; the plan and the tuned learning rates "
                "must be in git history before any confirmatory run (docs/STUDY_PLAN.md)"
            )
    t = testbed(args.dry_run)
    rates = plan.learning_rates()
    runs = args.runs / "confirmatory"
    todo = study_jobs.interleave(plan.METHODS, plan.CONFIRMATORY_SEEDS, {m: [rates[m]] for m in plan.METHODS})
    return _run(study_jobs.fast_jobs(t, todo, runs), args, runs, t, "confirmatory")


def cmd_explore(args: argparse.Namespace) -> int:
    from recipe.study.testbed2 import exploration

    t = testbed(args.dry_run)
    runs = args.runs / "exploration"
    return _run(
        exploration.probe_jobs(t, exploration.PROBES, runs, runs / "data"), args, runs, t, "exploration"
    )


def cmd_real(args: argparse.Namespace) -> int:
    t = testbed(args.dry_run)
    rates = plan.learning_rates()
    runs = args.runs / "real"
    todo = study_jobs.interleave(
        plan.REAL_TRAINER_METHODS, plan.REAL_TRAINER_SEEDS, {m: [rates[m]] for m in plan.REAL_TRAINER_METHODS}
    )
    steps = study_jobs.planned_steps(None)
    # validation at step 0 and after the last step only: verl's sampling of 4 x 1024 answers is minutes
    extra = format_overrides({"trainer.test_freq": steps, "trainer.logger": ["console"]})
    return _run(study_jobs.real_jobs(t, todo, runs, extra=extra), args, runs, t, "real")


def planned_runs(runs: Path, rates: dict[str, float] | None) -> list[Any]:
    """Every finished run of every phase, as ``collect.PlannedRun`` (phases not run yet are skipped)."""
    from recipe.study.common.collect import PlannedRun
    from recipe.study.driver import SUMMARY

    out = []
    for method, seed, lr in study_jobs.interleave(
        plan.METHODS, plan.TUNING_SEEDS, {m: plan.LR_GRID for m in plan.METHODS}
    ):
        out.append(
            PlannedRun(
                "tuning", "fast", method, seed, lr, runs / "tuning" / study_jobs.run_name(method, seed, lr)
            )
        )
    if rates is not None:
        phases = (
            ("pilot", "fast", plan.PILOT_METHODS, plan.PILOT_SEEDS),
            ("confirmatory", "fast", plan.METHODS, plan.CONFIRMATORY_SEEDS),
            ("real", "main_copo", plan.REAL_TRAINER_METHODS, plan.REAL_TRAINER_SEEDS),
        )
        for phase, trainer, methods, seeds in phases:
            for method, seed, lr in study_jobs.interleave(methods, seeds, {m: [rates[m]] for m in methods}):
                out.append(
                    PlannedRun(
                        phase, trainer, method, seed, lr, runs / phase / study_jobs.run_name(method, seed)
                    )
                )
    return [r for r in out if (r.path / SUMMARY).is_file()]


def write_machine_csv(runs: Path, docs: Path) -> None:
    from recipe.study.steps import write_csv

    log = runs / MACHINE_LOG
    if log.is_file():
        rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        write_csv(docs / "machine.csv", rows, ["time", "when", "gflops", "load1"])


def cmd_pilot_summarize(args: argparse.Namespace) -> int:
    from recipe.study.common import collect, docs
    from recipe.study.testbed2 import report

    t = testbed()
    problems = collect.validation_problems(t.data / "val.parquet")
    tuning = [r for r in planned_runs(args.runs, None) if r.phase == "tuning"]
    expected = len(plan.METHODS) * len(plan.TUNING_SEEDS) * len(plan.LR_GRID)
    if len(tuning) < expected:
        raise SystemExit(
            f"pilot-summarize: {len(tuning)} of {expected} tuning runs finished; run `tune` first"
        )
    rates = None
    if plan.LEARNING_RATES_FILE.is_file():
        rates = plan.learning_rates()
    pilot_runs = [r for r in planned_runs(args.runs, rates) if r.phase in ("tuning", "pilot")]
    collect.collect(pilot_runs, problems, args.docs, prefix="pilot_", block_steps=plan.BLOCK_STEPS)
    import pandas as pd

    chosen = report.choose_learning_rates(
        pd.read_csv(args.docs / "pilot_runs.csv").query("phase == 'tuning'")
    )
    if rates is not None and rates != chosen:
        raise SystemExit(f"{plan.LEARNING_RATES_FILE} holds {rates}, the tuning runs choose {chosen}")
    plan.LEARNING_RATES_FILE.write_text(
        json.dumps(
            {"rule": "highest mean AUC over the tuning seeds (ties: smaller lr)", "learning_rates": chosen},
            indent=2,
        )
        + "\n"
    )
    write_machine_csv(args.runs, args.docs)
    fragments = report.report(args.docs)
    docs.update_docs(fragments)
    print(fragments.get("tuning", ""), fragments.get("pilot", ""))
    return 0


def explored_runs(runs: Path, rates: dict[str, float]) -> list[Any]:
    """The exploration probes and the stopped v2 confirmatory study's finished runs, as ``PlannedRun``."""
    from recipe.study.common.collect import PlannedRun
    from recipe.study.driver import SUMMARY
    from recipe.study.testbed2.exploration import PROBES

    out = [
        PlannedRun("exploration", "fast", "grpo", p.seed, p.lr, runs / "exploration" / p.name) for p in PROBES
    ]
    for method in plan.METHODS:  # v2's confirmatory phase was stopped after seed 0 (docs/STUDY_PLAN.md)
        out.append(
            PlannedRun("stopped", "fast", method, 0, rates[method], runs / "confirmatory" / f"{method}-s0")
        )
    return [r for r in out if (r.path / SUMMARY).is_file()]


def cmd_summarize(args: argparse.Namespace) -> int:
    from recipe.study.common import collect, docs
    from recipe.study.testbed2 import plots, report

    t = testbed()
    problems = collect.validation_problems(t.data / "val.parquet")
    rates = plan.learning_rates()
    explored = explored_runs(args.runs, rates)
    if explored:
        collect.collect(explored, problems, args.docs, prefix="exploration_", block_steps=plan.BLOCK_STEPS)
        plots.plot_exploration(
            args.docs / "exploration_validation.csv", args.docs / "testbed2_exploration.png"
        )
    phases = () if plan.CONFIRMATORY_STOPPED else ("confirmatory", "real")
    runs = [r for r in planned_runs(args.runs, rates) if r.phase in phases]
    if runs:
        collect.collect(runs, problems, args.docs, block_steps=plan.BLOCK_STEPS)
        plots.plot_all(args.docs)
    write_machine_csv(args.runs, args.docs)
    fragments = report.report(args.docs)
    (args.docs / "summary.md").write_text(report.summary_markdown(fragments))
    docs.update_docs(fragments)
    print(report.summary_markdown(fragments))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="study_testbed2.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build", help="build (or find) testbed v2; prints its folder last")
    census = sub.add_parser("census", help="step-0 group outcomes per task and level")
    census.add_argument("--per-task", type=int, default=256, help="training prompts per task")
    census.add_argument("--seed", type=int, default=0)
    census.add_argument("--docs", type=Path, default=DOCS)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--runs", type=Path, default=RUNS, help="run folders (one subfolder per phase)")
    common.add_argument("--docs", type=Path, default=DOCS, help="committed CSVs and report")
    for name, text in (
        ("tune", "learning-rate grid on the tuning seeds"),
        ("pilot", "primary pair on the pilot seeds"),
        ("run", "confirmatory runs"),
        ("real", "verl-trainer confirmation"),
        ("explore", "the probes that tried to make testbed v2 learn"),
    ):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("--parallel", type=int, default=2, help="runs at once, one thread each")
        p.add_argument("--dry-run", action="store_true", help="print the plan and commands only")
    sub.add_parser("pilot-summarize", parents=[common], help="tuning + pilot -> learning rates and power")
    sub.add_parser("summarize", parents=[common], help="CSVs, report, plots, docs fragments")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {
        "build": cmd_build,
        "census": cmd_census,
        "tune": cmd_tune,
        "pilot": cmd_pilot,
        "pilot-summarize": cmd_pilot_summarize,
        "run": cmd_run,
        "real": cmd_real,
        "explore": cmd_explore,
        "summarize": cmd_summarize,
    }
    from recipe.study.driver import dispatch

    return dispatch(commands, args.action, args)
