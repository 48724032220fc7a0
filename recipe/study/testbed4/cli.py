"""``scripts/study_testbed4.py``: the regime map (docs/STUDY_PLAN.md, "Amendment: regime map (issue 37)").

    study_testbed4.py build          # testbed v3 (cached) and each regime's data folder (needs rates.csv)
    study_testbed4.py rates          # per level, groups of G = 8 at step 0 on v3's validation set -> rates.csv, regimes.csv
    study_testbed4.py census         # per regime, groups of G = 8 at step 0 on its training rows -> census.csv
    study_testbed4.py cost           # a few GRPO steps, single-seed and batched trainers -> cost.csv
    study_testbed4.py probe          # GRPO per regime on the tuning seed (tuning data) -> probe.csv
    study_testbed4.py docs           # the CSVs -> the docs' testbed4/* blocks
    study_testbed4.py r40 tune ...   # a shared phase (tune, pilot, run, real) of one regime's plan
    study_testbed4.py r40 pilot-summarize   # its tuning and pilot -> learning_rates_r40.json, CSVs, blocks

The shared phases are ``recipe.study.common.cli``'s on the regime's ``StudyPlan`` (``plan.PLANS``),
whose runs read the regime's data folder. ``<regime> pilot-summarize`` writes the regime's tuning and
pilot CSVs to ``docs/study_cpu/testbed4/<regime>/``, its ``learning_rates_<regime>.json`` and the docs'
``testbed4_<regime>/*`` blocks (``regime_report``); ``<regime> summarize`` its confirmatory CSVs, figures and
blocks there, then the map across the regimes (``regime_map``: the ``testbed4/regime_map`` and
``testbed4/when_to_use`` blocks, once every regime's confirmatory runs are in).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from recipe.study.common import cli
from recipe.study.testbed4 import plan as p

REGIMES = {r.name: r for r in p.REGIMES}


def _v3() -> Any:
    return cli.testbed(replace_data(p.PLANS["r40"]))


def replace_data(plan: Any) -> Any:
    """The plan without its data view (its testbed: v3 itself)."""
    from dataclasses import replace

    return replace(plan, data=None)


def write_regimes(docs: Path) -> None:
    """``regimes.csv``: every regime's weights and set sizes from the committed rates."""
    from recipe.study.steps import write_csv
    from recipe.study.testbed4.report import REGIME_COLUMNS

    rates = p.measured_rates(docs / "rates.csv")
    rows = []
    for regime in p.REGIMES:
        spec = p.regime_data(regime, "-", rates)
        for level, w, a, nv, nt in zip(
            p.LEVELS, spec.weights, rates, spec.val_counts(), spec.train_counts(), strict=True
        ):
            rows.append(
                {"regime": regime.name, "target": regime.all_wrong, "level": level, "weight": w, "rate": a,
                 "val_count": nv, "train_count": nt}
            )  # fmt: skip
    write_csv(docs / "regimes.csv", rows, REGIME_COLUMNS)


def cmd_build(args: argparse.Namespace) -> int:
    for name, plan in p.PLANS.items():
        print(f"[testbed4] {name}: {cli.testbed(plan).root}")
    return 0


def cmd_rates(args: argparse.Namespace) -> int:
    from recipe.study.census import CENSUS_COLUMNS
    from recipe.study.steps import write_csv
    from recipe.study.testbed4.census import sample_census

    t = _v3()
    rows = sample_census(t.model, t.data / "val.parquet", p.G, p.RATES_SEED)
    write_csv(args.docs / "rates.csv", rows, list(CENSUS_COLUMNS))
    write_regimes(args.docs)
    return cmd_docs(args)


def cmd_census(args: argparse.Namespace) -> int:
    from recipe.study.steps import write_csv
    from recipe.study.testbed4.census import sample_census
    from recipe.study.testbed4.report import CENSUS_COLUMNS

    rows = []
    for name, plan in p.PLANS.items():
        t = cli.testbed(plan)
        rows += [
            {"regime": name, **r}
            for r in sample_census(t.model, t.data / "train.parquet", p.G, p.CENSUS_SEED)
        ]
        print(f"[testbed4] census {name}: {rows[-1]}", flush=True)
    write_csv(args.docs / "census.csv", rows, CENSUS_COLUMNS)
    return cmd_docs(args)


def cmd_cost(args: argparse.Namespace) -> int:
    import tempfile

    from recipe.copo.config_check import compose
    from recipe.study.steps import write_csv
    from recipe.study.testbed4.budget import COST_COLUMNS
    from recipe.study.testbed4.cost import measure

    t = cli.testbed(p.PLANS[args.regime])
    trainer = compose(config_name=p.CONFIG_NAME).trainer
    planned = (int(trainer.total_training_steps), int(trainer.test_freq))
    seeds = list(range(4900, 4900 + args.seeds))  # timing only, never a tuning or confirmatory seed
    with tempfile.TemporaryDirectory(prefix="testbed4-cost-") as tmp:
        rows = measure(t, Path(tmp), args.steps, seeds, p.CONFIG_NAME, planned)
    write_csv(args.docs / "cost.csv", rows, COST_COLUMNS)
    return cmd_docs(args)


def cmd_probe(args: argparse.Namespace) -> int:
    """GRPO on the tuning seed at the grid's middle rate, every regime at once -> probe.csv."""
    from recipe.study.driver import run_jobs
    from recipe.study.machine import record_machine
    from recipe.study.steps import write_csv
    from recipe.study.testbed4 import probe

    todo = []
    for name, plan in p.PLANS.items():
        t = cli.testbed(plan, args.dry_run)
        job, out = probe.probe_job(plan, t)
        todo.append((name, plan, t, job, out))
    for _, plan, t, _, _ in todo:
        if not args.dry_run:
            record_machine(plan.runs_dir, t, "probe start")
    failures = run_jobs([job for *_, job, _ in todo], args.parallel, dry_run=args.dry_run)
    if args.dry_run:
        return 0
    for _, plan, t, _, _ in todo:
        record_machine(plan.runs_dir, t, "probe end")
    rows = [row for name, plan, _, _, out in todo if (out / "validation.npz").is_file()
            for row in probe.curve_rows(name, plan, out)]  # fmt: skip
    write_csv(args.docs / "probe.csv", rows, probe.PROBE_COLUMNS)
    cmd_docs(args)
    return 1 if failures else 0


def cmd_docs(args: argparse.Namespace) -> int:
    from recipe.study.common import docs
    from recipe.study.testbed4 import report

    fragments = report.report(args.docs)
    docs.update_docs(fragments, prefix="testbed4/")
    print("\n".join(fragments.values()))
    return 0


def summarize_regime(study: cli.Study, args: argparse.Namespace) -> int:
    """The shared ``summarize`` of one regime, then the map across regimes (``testbed4/*`` blocks) from the
    regimes' folders beside it."""
    from recipe.study.common import docs
    from recipe.study.testbed4 import map_plot, regime_map, report

    code = cli.cmd_summarize(study, args)
    docs.update_docs(report.report(args.docs.parent), prefix="testbed4/")
    rows = regime_map.regime_map(p.PLANS, {r.name: r.all_wrong for r in p.REGIMES}, args.docs.parent)
    if rows is not None:  # every regime's confirmatory runs are in
        map_plot.plot_regime_map(rows, args.docs.parent / "regime_map.png")
    return code


def regime_main(name: str, argv: list[str]) -> int:
    from functools import partial

    from recipe.study.testbed4 import regime_report

    plan = p.PLANS[name]
    study = cli.Study(plan, partial(regime_report.report, plan), regime_report.summary_markdown)
    parser, _, _ = cli.build_parser(plan, __doc__ or "")
    args = parser.parse_args(argv)
    commands = {"build": cmd_build, **cli.commands(study), "summarize": partial(summarize_regime, study)}
    from recipe.study.driver import dispatch

    return dispatch(commands, args.action, args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="study_testbed4.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--docs", type=Path, default=p.DOCS, help="committed CSVs (default %(default)s)")
    sub.add_parser("build", parents=[common], help="v3 and the regimes' data folders")
    sub.add_parser("rates", parents=[common], help="per-level groups of G on v3's validation set")
    sub.add_parser("census", parents=[common], help="per-regime groups of G on its training rows")
    cost = sub.add_parser("cost", parents=[common], help="CPU seconds per step and validation")
    cost.add_argument("--steps", type=int, default=4, help="steps per trainer (default %(default)s)")
    cost.add_argument(
        "--seeds", type=int, default=8, help="seeds of the batched trainer (default %(default)s)"
    )
    cost.add_argument("--regime", choices=sorted(REGIMES), default="r40", help="data (default %(default)s)")
    probe = sub.add_parser("probe", parents=[common], help="GRPO per regime on the tuning seed (tuning data)")
    probe.add_argument(
        "--parallel", type=int, default=3, help="runs at once, one thread each (default %(default)s)"
    )
    probe.add_argument("--dry-run", action="store_true", help="print the jobs only")
    sub.add_parser("docs", parents=[common], help="the docs' testbed4/* blocks from the CSVs")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in REGIMES:
        return regime_main(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    commands = {
        "build": cmd_build,
        "rates": cmd_rates,
        "census": cmd_census,
        "cost": cmd_cost,
        "probe": cmd_probe,
        "docs": cmd_docs,
    }
    from recipe.study.driver import dispatch

    return dispatch(commands, args.action, args)
