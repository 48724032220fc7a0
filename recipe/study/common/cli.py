"""The phases every testbed study runs, on its plan (``StudyPlan``): the command line's shared part.

    tune               # the learning-rate grid on the tuning seeds (fast trainer), extended beyond an edge if the plan says so
    pilot              # the plan's pilot methods (v2, v3: the primary pair) on the pilot seeds at the tuned rates
    pilot-summarize    # -> pilot_runs.csv, learning_rates.json, the plan's tuning/power blocks
    run                # the confirmatory methods' runs (refused unless the plan and rates are committed)
    real               # the confirmation through verl's trainer (main_copo)
    summarize          # runs -> CSVs -> report, plots and the docs' generated blocks

A study (``recipe.study.testbedN.cli``) passes its plan and its report (``Study``) and adds its own
phases (``build``, a census, probes). Every phase is resumable (finished runs are skipped), two runs at
a time, one thread each; SIGTERM or Ctrl-C stops every run it started. ``--dry-run`` prints the plan.
Runs live in ``runs/study_<name>/<phase>/`` (ignored by git). Each phase's start and end are recorded
as they happen (``recipe.study.machine``), with the machine's speed and load.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from recipe.launch import format_overrides
from recipe.study.common import jobs as study_jobs
from recipe.study.common import rates as lr_rule
from recipe.study.common.collect import PlannedRun
from recipe.study.common.plan import StudyPlan
from recipe.study.machine import MACHINE_LOG, committed, record_machine
from recipe.study.testbed.build import Testbed, ensure_testbed, locate_testbed

Command = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Study:
    """A testbed study for the command line: its plan and what turns its CSVs into documents."""

    plan: StudyPlan
    report: Callable[[Path], dict[str, str]]  # docs folder -> the docs' generated blocks
    summary: Callable[[dict[str, str]], str]  # blocks -> summary.md
    # run before the confirmatory CSVs are collected by ``summarize`` (v2: its exploration probes)
    before_summary: Callable[[argparse.Namespace, Any], None] | None = field(default=None)


def testbed(plan: StudyPlan, dry_run: bool = False) -> Testbed:
    """The plan's built testbed, or its data view (``plan.data``: testbed v4's regime mixture) of it."""
    base = locate_testbed(plan.testbed) if dry_run else ensure_testbed(plan.testbed)
    return base if plan.data is None else plan.data(base, dry_run)


def run_phase(
    jobs: list[Any],
    args: argparse.Namespace,
    testbed_: Testbed,
    phase: str,
    start_before: float | None = None,
) -> int:
    """Run ``jobs`` (``args.parallel`` at a time), recording the phase's start and end in ``args.runs``."""
    from recipe.study.driver import run_jobs

    print(f"[study] {phase}: {len(jobs)} runs", flush=True)
    if not args.dry_run:
        record_machine(args.runs, testbed_, f"{phase} start")
    failures = run_jobs(jobs, args.parallel, dry_run=args.dry_run, start_before=start_before)
    if not args.dry_run:
        record_machine(args.runs, testbed_, f"{phase} end")
    return 1 if failures else 0


def fast_jobs(
    plan: StudyPlan, t: Testbed, todo: Sequence[tuple[str, int, float]], runs: Path, name_lr: bool = False
) -> list[Any]:
    return study_jobs.fast_jobs(
        t, todo, runs, name_lr=name_lr, config_name=plan.config_name, sample_matched=plan.sample_matched
    )


def finished_auc(plan: StudyPlan, tuning_dir: Path, method: str, lr: float) -> float | None:
    """Mean AUC over the tuning seeds of ``method`` at ``lr`` (None until every seed's run finished),
    read as the collection reads it (compute-matched DAPO on the sample axis) and as ``pilot_runs.csv``
    states it (6 significant digits), so that ``tune`` and ``pilot-summarize`` choose alike."""
    from recipe.study.common.collect import run_row
    from recipe.study.driver import SUMMARY

    values = []
    for seed in plan.tuning_seeds:
        path = tuning_dir / study_jobs.run_name(method, seed, lr)
        if not (path / SUMMARY).is_file():
            return None
        auc = run_row(PlannedRun("tuning", "fast", method, seed, lr, path), plan.tasks)[0]["auc"]
        values.append(float(f"{auc:.6g}"))
    return sum(values) / len(values)


def tuning_rates(plan: StudyPlan, tuning_dir: Path | None = None) -> dict[str, list[float]]:
    """Per method, the rates its tuning runs: the plan's grid, and with ``plan.extend_lr_grid`` each
    extension beyond an edge that the finished runs in ``tuning_dir`` demand (``recipe.study.common.rates``)."""
    if not plan.extend_lr_grid or tuning_dir is None:
        return {m: list(plan.lr_grid) for m in plan.methods}
    return {
        m: lr_rule.rate_chain(plan.lr_grid, partial(finished_auc, plan, tuning_dir, m), extend=True)
        for m in plan.methods
    }


def tuning_plan(plan: StudyPlan, tuning_dir: Path | None = None) -> list[tuple[str, int, float]]:
    """``(method, seed, lr)`` of every tuning run (the grid's, then the extensions' as far as the finished
    runs in ``tuning_dir`` decide them)."""
    return study_jobs.interleave(plan.methods, plan.tuning_seeds, tuning_rates(plan, tuning_dir))


def at_rates(
    methods: Sequence[str], seeds: Sequence[int], rates: dict[str, float]
) -> list[tuple[str, int, float]]:
    return study_jobs.interleave(methods, seeds, {m: [rates[m]] for m in methods})


def phase_methods_seeds(plan: StudyPlan, phase: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The methods and seeds a phase at the tuned rates runs (``pilot``, ``confirmatory``, ``real``)."""
    return {
        "pilot": (plan.pilot_methods, plan.pilot_seeds),
        "confirmatory": (plan.confirmatory_methods, plan.confirmatory_seeds),
        "real": (plan.real_trainer_methods, plan.real_trainer_seeds),
    }[phase]


def phase_plan(plan: StudyPlan, phase: str, rates: dict[str, float]) -> list[tuple[str, int, float]]:
    """``(method, seed, lr)`` of every run of a phase at the tuned ``rates``, seed by seed."""
    return at_rates(*phase_methods_seeds(plan, phase), rates)


def cmd_tune(plan: StudyPlan, args: argparse.Namespace) -> int:
    """The grid, then (``plan.extend_lr_grid``) round after round the extensions the finished runs demand,
    until the chosen rate of every method lies inside its rates (a dry run shows the next round only)."""
    t = testbed(plan, args.dry_run)
    tuning_dir = args.runs / "tuning"
    todo = tuning_plan(plan, tuning_dir)
    phase = "tuning"
    while True:
        code = run_phase(fast_jobs(plan, t, todo, tuning_dir, name_lr=True), args, t, phase)
        if code or args.dry_run:
            return code
        more = tuning_plan(plan, tuning_dir)
        if more == todo:
            return 0
        todo, phase = more, "tuning extension"


def cmd_pilot(plan: StudyPlan, args: argparse.Namespace) -> int:
    t = testbed(plan, args.dry_run)
    todo = phase_plan(plan, "pilot", plan.learning_rates())
    return run_phase(fast_jobs(plan, t, todo, args.runs / "pilot"), args, t, "pilot")


def cmd_run(plan: StudyPlan, args: argparse.Namespace) -> int:
    prog = f"study_{plan.name}.py run"
    if plan.confirmatory_stopped:
        raise SystemExit(
            f"{prog}: the confirmatory phase of this plan was stopped (docs/STUDY_PLAN.md, status); "
            "a new study needs a new plan"
        )
    for path in (plan.study_doc, plan.learning_rates_file):
        if not args.dry_run and not committed(path):
            raise SystemExit(
                f"{prog}: {path} is not committed as it is; the plan and the tuned learning rates "
                "must be in git history before any confirmatory run (docs/STUDY_PLAN.md)"
            )
    t = testbed(plan, args.dry_run)
    jobs = fast_jobs(
        plan,
        t,
        phase_plan(plan, "confirmatory", plan.learning_rates()),
        args.runs / "confirmatory",
    )
    deadline = plan.confirmatory_deadline_utc
    start_before = None if deadline is None else datetime.fromisoformat(deadline).timestamp()
    return run_phase(jobs, args, t, "confirmatory", start_before=start_before)


def cmd_real(plan: StudyPlan, args: argparse.Namespace) -> int:
    t = testbed(plan, args.dry_run)
    todo = phase_plan(plan, "real", plan.learning_rates())
    steps = study_jobs.planned_steps(None, plan.config_name)
    # validation at step 0 and after the last step only: verl's sampling of 4 x 1024 answers is minutes
    extra = format_overrides({"trainer.test_freq": steps, "trainer.logger": ["console"]})
    jobs = study_jobs.real_jobs(t, todo, args.runs / "real", extra=extra, config_name=plan.config_name)
    return run_phase(jobs, args, t, "real")


def planned_runs(plan: StudyPlan, runs: Path, rates: dict[str, float] | None) -> list[PlannedRun]:
    """Every finished run of every phase (phases not run yet are skipped)."""
    from recipe.study.driver import SUMMARY

    out = [
        PlannedRun("tuning", "fast", m, s, lr, runs / "tuning" / study_jobs.run_name(m, s, lr))
        for m, s, lr in tuning_plan(plan, runs / "tuning")
    ]
    if rates is not None:
        for phase, trainer in (("pilot", "fast"), ("confirmatory", "fast"), ("real", "main_copo")):
            for m, s, lr in phase_plan(plan, phase, rates):
                out.append(PlannedRun(phase, trainer, m, s, lr, runs / phase / study_jobs.run_name(m, s)))
    return [r for r in out if (r.path / SUMMARY).is_file()]


def write_machine_csv(runs: Path, docs: Path) -> None:
    """``machine.csv``: each phase's start and end as a UTC time (to the second), speed and load."""
    from recipe.study.steps import write_csv

    log = runs / MACHINE_LOG
    if log.is_file():
        rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        for row in rows:
            row["time"] = datetime.fromtimestamp(row["time"], timezone.utc).isoformat(timespec="seconds")
        write_csv(docs / "machine.csv", rows, ["time", "when", "gflops", "load1"])


def complete_seeds(plan: StudyPlan, runs: list[PlannedRun]) -> list[PlannedRun]:
    """The runs of the seeds whose runs of every method finished, per phase (the plan's time-based stop)."""
    methods = {phase: set(phase_methods_seeds(plan, phase)[0]) for phase in ("confirmatory", "real")}
    done: dict[tuple[str, int], set[str]] = {}
    for r in runs:
        done.setdefault((r.phase, r.seed), set()).add(r.method)
    keep = [r for r in runs if done[(r.phase, r.seed)] >= methods[r.phase]]
    dropped = sorted({f"{r.phase} seed {r.seed}" for r in runs} - {f"{r.phase} seed {r.seed}" for r in keep})
    if dropped:
        print(f"[study] left out (not every method finished before the deadline): {', '.join(dropped)}")
    return keep


def cmd_pilot_summarize(study: Study, args: argparse.Namespace) -> int:
    import pandas as pd

    from recipe.study.common import analysis, collect, docs

    plan = study.plan
    problems = collect.validation_problems(testbed(plan).data / "val.parquet")
    tuning = [r for r in planned_runs(plan, args.runs, None) if r.phase == "tuning"]
    planned = tuning_plan(plan, args.runs / "tuning")
    if len(tuning) < len(planned):
        finished = {r.name for r in tuning}
        missing = [n for m, s, lr in planned if (n := study_jobs.run_name(m, s, lr)) not in finished]
        raise SystemExit(
            f"pilot-summarize: {len(tuning)} of {len(planned)} tuning runs finished (the grid"
            + (" and the extensions beyond an edge that the finished runs demand" if plan.extend_lr_grid else "")
            + f"); run `tune` first (it runs: {', '.join(missing)})"
        )
    rates = plan.learning_rates() if plan.learning_rates_file.is_file() else None
    pilot = [r for r in planned_runs(plan, args.runs, rates) if r.phase in ("tuning", "pilot")]
    collect.collect(plan, pilot, problems, args.docs, prefix="pilot_")
    tuning_csv = pd.read_csv(args.docs / "pilot_runs.csv").query("phase == 'tuning'")
    chosen = analysis.choose_learning_rates(plan, tuning_csv)
    on_edge = analysis.edge_extensions(plan, tuning_csv)
    if on_edge:  # tune's chain reads the same AUCs, so this holds only when tune has not run since
        todo = [study_jobs.run_name(m, s, lr) for m, lr in on_edge.items() for s in plan.tuning_seeds]
        raise SystemExit(
            f"pilot-summarize: the chosen rate of {', '.join(on_edge)} sits on an edge of the rates run; the rule "
            f"extends the grid beyond it: run `tune` again (it runs: {', '.join(todo)})"
        )
    if rates is not None and rates != chosen:
        raise SystemExit(f"{plan.learning_rates_file} holds {rates}, the tuning runs choose {chosen}")
    plan.learning_rates_file.write_text(
        json.dumps({"rule": plan.rate_rule, "learning_rates": chosen}, indent=2) + "\n"
    )
    write_machine_csv(args.runs, args.docs)
    fragments = study.report(args.docs)
    docs.update_docs(fragments, prefix=plan.doc_prefix)
    print("\n".join(fragments.get(k, "") for k in ("tuning", "tuning_criteria", "pilot", "pilot_methods")))
    return 0


def cmd_summarize(study: Study, args: argparse.Namespace) -> int:
    from recipe.study.common import collect, docs, plots

    plan = study.plan
    problems = collect.validation_problems(testbed(plan).data / "val.parquet")
    if study.before_summary is not None:
        study.before_summary(args, problems)
    phases = () if plan.confirmatory_stopped else ("confirmatory", "real")
    runs = [r for r in planned_runs(plan, args.runs, plan.learning_rates()) if r.phase in phases]
    runs = complete_seeds(plan, runs)
    if runs:
        collect.collect(plan, runs, problems, args.docs)
        plots.plot_all(plan, args.docs)
    write_machine_csv(args.runs, args.docs)
    fragments = study.report(args.docs)
    (args.docs / "summary.md").write_text(study.summary(fragments))
    docs.update_docs(fragments, prefix=plan.doc_prefix)
    print(study.summary(fragments))
    return 0


def build_parser(
    plan: StudyPlan, description: str
) -> tuple[argparse.ArgumentParser, Any, argparse.ArgumentParser]:
    """The study's parser with ``build`` and the shared phases; returns it, its subparsers and the
    parent parser of ``--runs``/``--docs`` (for a study's own phases)."""
    parser = argparse.ArgumentParser(
        prog=f"study_{plan.name}.py",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build", help=f"build (or find) {plan.name}; prints its folder last")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--runs", type=Path, default=plan.runs_dir, help="run folders (one subfolder per phase) (default %(default)s)"
    )
    common.add_argument("--docs", type=Path, default=plan.docs_dir, help="committed CSVs and report (default %(default)s)")
    for name, text in (
        ("tune", "learning-rate grid on the tuning seeds"),
        ("pilot", "the plan's pilot methods on the pilot seeds"),
        ("run", "confirmatory runs"),
        ("real", "verl-trainer confirmation"),
    ):
        add_run_phase(sub, common, name, text)
    sub.add_parser("pilot-summarize", parents=[common], help="tuning + pilot -> learning rates and power")
    sub.add_parser("summarize", parents=[common], help="CSVs, report, plots, docs blocks")
    return parser, sub, common


def add_run_phase(sub: Any, common: argparse.ArgumentParser, name: str, text: str) -> argparse.ArgumentParser:
    """A phase that starts runs: ``--parallel`` and ``--dry-run`` beside ``--runs``/``--docs``."""
    p = sub.add_parser(name, parents=[common], help=text)
    p.add_argument("--parallel", type=int, default=2, help="runs at once, one thread each (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and commands only")
    return p


def commands(study: Study) -> dict[str, Command]:
    """The shared phases' commands (a study adds ``build`` and its own)."""
    plan = study.plan
    return {
        "tune": partial(cmd_tune, plan),
        "pilot": partial(cmd_pilot, plan),
        "pilot-summarize": partial(cmd_pilot_summarize, study),
        "run": partial(cmd_run, plan),
        "real": partial(cmd_real, plan),
        "summarize": partial(cmd_summarize, study),
    }
