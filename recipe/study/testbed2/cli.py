"""``scripts/study_testbed2.py``: the testbed v2 study (docs/STUDY_PLAN.md), phase by phase.

    study_testbed2.py build              # testbed v2: tokenizer, SFT policy, data (cached)
    study_testbed2.py census             # step-0 groups per task and level -> docs/study_cpu/testbed2/census.*
    study_testbed2.py tune               # the learning-rate grid on the tuning seeds (fast trainer)
    study_testbed2.py pilot              # the primary pair on the pilot seeds at the tuned rates
    study_testbed2.py pilot-summarize    # -> pilot_runs.csv, learning_rates.json, the plan's tuning/power fragments
    study_testbed2.py run                # refused: this plan's confirmatory phase was stopped
    study_testbed2.py real               # the confirmation through verl's trainer (main_copo)
    study_testbed2.py explore            # the probes that tried to make v2 learn (exploration.py)
    study_testbed2.py summarize          # runs -> CSVs -> report, plots and the docs' generated fragments

The shared phases are ``recipe.study.common.cli`` on v2's ``PLAN``; v2's own: its build message, its
census, its exploration probes (and their CSVs and figure at ``summarize``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from recipe.study.common import cli
from recipe.study.common import jobs as study_jobs
from recipe.study.common.collect import PlannedRun
from recipe.study.testbed.build import Testbed
from recipe.study.testbed2 import report
from recipe.study.testbed2.plan import PLAN


def cmd_build(args: argparse.Namespace) -> int:
    t = cli.testbed(PLAN)
    manifest = t.manifest()
    print(
        f"[testbed2] {t.key}: {manifest['parameters'] / 1e6:.2f}M parameters, SFT {manifest['build_seconds']:.0f} s"
    )
    print(t.root)
    return 0


def composed(t: Testbed, method: str, seed: int, lr: float) -> Any:
    from recipe.copo.config_check import compose_and_validate

    return compose_and_validate(study_jobs.overrides(t, method, seed, lr), config_name=PLAN.config_name)


def cmd_census(args: argparse.Namespace) -> int:
    from recipe.study.census import census_markdown
    from recipe.study.testbed2.census import run_census

    t = cli.testbed(PLAN)
    config = composed(t, PLAN.baseline, args.seed, PLAN.lr_grid[0])
    print(census_markdown(run_census(config, args.per_task, args.seed, args.docs)))
    return 0


def cmd_explore(args: argparse.Namespace) -> int:
    from recipe.study.testbed2 import exploration

    t = cli.testbed(PLAN, args.dry_run)
    runs = args.runs / "exploration"
    return cli.run_phase(
        exploration.probe_jobs(t, exploration.PROBES, runs, runs / "data"), args, t, "exploration"
    )


def explored_runs(runs: Path, rates: dict[str, float]) -> list[PlannedRun]:
    """The exploration probes and the stopped v2 confirmatory study's finished runs."""
    from recipe.study.driver import SUMMARY
    from recipe.study.testbed2.exploration import PROBES

    out = [
        PlannedRun("exploration", "fast", "grpo", p.seed, p.lr, runs / "exploration" / p.name) for p in PROBES
    ]
    for method in PLAN.methods:  # v2's confirmatory phase was stopped after seed 0 (docs/STUDY_PLAN.md)
        out.append(
            PlannedRun("stopped", "fast", method, 0, rates[method], runs / "confirmatory" / f"{method}-s0")
        )
    return [r for r in out if (r.path / SUMMARY).is_file()]


def summarize_exploration(args: argparse.Namespace, problems: Any) -> None:
    """``exploration_*.csv`` and ``testbed2_exploration.png`` from the probes' finished runs."""
    from recipe.study.common import collect
    from recipe.study.testbed2 import plots

    explored = explored_runs(args.runs, PLAN.learning_rates())
    if explored:
        collect.collect(PLAN, explored, problems, args.docs, prefix="exploration_")
        plots.plot_exploration(
            args.docs / "exploration_validation.csv", args.docs / "testbed2_exploration.png"
        )


STUDY = cli.Study(PLAN, report.report, report.summary_markdown, before_summary=summarize_exploration)


def build_parser() -> argparse.ArgumentParser:
    parser, sub, common = cli.build_parser(PLAN, __doc__ or "")
    census = sub.add_parser("census", help="step-0 group outcomes per task and level")
    census.add_argument("--per-task", type=int, default=256, help="training prompts per task (default %(default)s)")
    census.add_argument("--seed", type=int, default=0, help="sampling seed (default %(default)s)")
    census.add_argument("--docs", type=Path, default=PLAN.docs_dir, help="(default %(default)s)")
    cli.add_run_phase(sub, common, "explore", "the probes that tried to make testbed v2 learn")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"build": cmd_build, "census": cmd_census, "explore": cmd_explore, **cli.commands(STUDY)}
    from recipe.study.driver import dispatch

    return dispatch(commands, args.action, args)
