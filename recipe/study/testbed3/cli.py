"""``scripts/study_testbed3.py``: the testbed v3 study (docs/STUDY_PLAN.md, "Amendment: testbed v3").

    study_testbed3.py build              # testbed v3: v2's policy + a noisy SFT continuation, re-split data (cached)
    study_testbed3.py levels             # greedy vs sampled accuracy per level, v2 and v3 -> docs/study_cpu/testbed3/levels.csv
    study_testbed3.py tune               # the learning-rate grid on the tuning seeds (fast trainer)
    study_testbed3.py pilot              # the primary pair on the pilot seeds at the tuned rates
    study_testbed3.py pilot-summarize    # -> pilot_runs.csv, learning_rates.json, the plan's tuning/power blocks
    study_testbed3.py run                # the confirmatory runs (refused unless the plan and rates are committed)
    study_testbed3.py real               # the confirmation through verl's trainer (main_copo)
    study_testbed3.py summarize          # runs -> CSVs -> report, plots and the docs' generated blocks

The shared phases are ``recipe.study.common.cli`` on v3's ``PLAN`` (its confirmatory runs stop starting
at the plan's deadline; the analysis takes the seeds whose every method finished); v3's own: its build
message and its level census.
"""

from __future__ import annotations

import argparse

from recipe.study.common import cli
from recipe.study.testbed.build import ensure_testbed
from recipe.study.testbed3 import report
from recipe.study.testbed3.plan import PLAN

STUDY = cli.Study(PLAN, report.report, report.summary_markdown)


def cmd_build(args: argparse.Namespace) -> int:
    t = cli.testbed(PLAN)
    manifest = t.manifest()
    print(
        f"[testbed3] {t.key}: continued from {manifest['base']}, {manifest['val_problems']} validation and "
        f"{manifest['train_problems']} training problems, SFT {manifest['build_seconds']:.0f} s"
    )
    print(t.root)
    return 0


def cmd_levels(args: argparse.Namespace) -> int:
    import pandas as pd

    from recipe.study.common.testbeds import TESTBED_V2
    from recipe.study.testbed3 import levels

    t = cli.testbed(PLAN)
    base = ensure_testbed(TESTBED_V2)
    rows = []
    for name, tb in (("v2 (base)", base), ("v3", t)):
        rows += levels.measure(tb.model, t.data / "val.parquet", name)
    levels.write(rows, args.docs / "levels.csv")
    print(levels.levels_markdown(pd.read_csv(args.docs / "levels.csv")))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser, sub, common = cli.build_parser(PLAN, __doc__ or "")
    sub.add_parser(
        "levels", parents=[common], help="greedy vs sampled accuracy per level (v2 and v3 policies)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"build": cmd_build, "levels": cmd_levels, **cli.commands(STUDY)}
    from recipe.study.driver import dispatch

    return dispatch(commands, args.action, args)
