"""A regime's ``pilot-summarize`` (testbed v4): the tuning table, the learning criterion, the smallest
detectable effect and the descriptive table of every method, on synthetic run folders, each number
re-derived here by a loop; and the docs' ``testbed4_<regime>/*`` blocks equal their derivation from the
committed CSVs (empty before the phase has run)."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from recipe import stats
from recipe.study.common import cli
from recipe.study.common.jobs import run_name
from recipe.study.testbed4 import plan as p
from recipe.study.testbed4 import regime_report
from tests.recipe.study.doc_blocks import assert_blocks_derived, doc_blocks
from tests.recipe.study.fake_runs import auc_of, regime_cli_sandbox, write_run

PEAKS = {"grpo": 2e-4, "copo_soft_with_zero": 2e-4, "copo_soft": 4e-4, "dapo_filter": 1e-4,
         "copo_variant_nonpositive": 2e-4}  # fmt: skip
# per method: the gain over step 0 at the tuned rate; per seed a shift shared by every method but the
# primary treatment's (so the paired differences vary over seeds)
LEVEL = {"grpo": 0.20, "copo_soft_with_zero": 0.15, "copo_soft": 0.18, "dapo_filter": 0.22,
         "copo_variant_nonpositive": 0.21}  # fmt: skip
SHIFT = {4000: 0.0, 4001: 0.01, 4002: -0.02}
GRID = (1e-4, 2e-4, 4e-4)
# the grid, and the extensions the rule asks for: copo_soft's and dapo_filter's peaks sit on its edges
RATES_RUN = {m: GRID for m in PEAKS} | {"copo_soft": (*GRID, 8e-4), "dapo_filter": (5e-5, *GRID)}
ALL_RATES = (5e-5, *GRID, 8e-4)


def _tuning_curve(method: str, lr: float) -> list[float]:
    level = LEVEL[method] - 0.03 * abs(math.log2(lr / PEAKS[method]))
    return [0.3, 0.3 + level / 2, 0.3 + level, 0.3 + level]


def _pilot_curve(method: str, seed: int) -> list[float]:
    level = LEVEL[method] + (0.0 if method == "copo_soft_with_zero" else SHIFT[seed])
    return [0.3, 0.3 + level / 2, 0.3 + level, 0.3 + level]


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, argparse.Namespace, dict[str, str]]:
    plan = replace(p.PLANS["r15"], learning_rates_file=tmp_path / "learning_rates_r15.json")
    written = regime_cli_sandbox(tmp_path, monkeypatch, "testbed4_r15/max")
    runs = tmp_path / "runs"
    for method in plan.methods:
        for lr in RATES_RUN[method]:
            write_run(runs / "tuning" / run_name(method, 4000, lr), "testbed4_r15/max", _tuning_curve(method, lr))
    args = argparse.Namespace(runs=runs, docs=tmp_path / "docs")
    args.docs.mkdir()
    return plan, args, written


def test_pilot_summarize_states_the_tuning_then_the_pilot_of_every_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, args, written = _setup(tmp_path, monkeypatch)
    study = cli.Study(plan, partial(regime_report.report, plan), regime_report.summary_markdown)
    assert cli.cmd_pilot_summarize(study, args) == 0
    assert json.loads(plan.learning_rates_file.read_text())["learning_rates"] == pytest.approx(PEAKS)
    assert set(written) == {"testbed4_r15/tuning"}  # no pilot yet: its blocks stay as they are
    tuning = written["testbed4_r15/tuning"]
    for method in plan.methods:  # the table's cells, re-derived by the loop reference
        cells = []
        for lr in ALL_RATES:
            curve = _tuning_curve(method, lr)
            cells.append(f"{100 * auc_of(curve):.1f} ({100 * curve[-1]:.1f})" if lr in RATES_RUN[method] else "-")
        assert f"| {method} | " + " | ".join(cells) + f" | {PEAKS[method]:g} | yes |" in tuning
    assert "divided by 90" in tuning

    # the pilot: every method on 4001, 4002 at its tuned rate
    for seed in plan.pilot_seeds:
        for method in plan.pilot_methods:
            write_run(args.runs / "pilot" / f"{method}-s{seed}", "testbed4_r15/max", _pilot_curve(method, seed))
    assert cli.cmd_pilot_summarize(study, args) == 0
    assert set(written) == {f"testbed4_r15/{k}" for k in ("tuning", "tuning_criteria", "pilot", "pilot_methods")}
    seeds = (4000, 4001, 4002)
    diffs = [auc_of(_pilot_curve("copo_soft_with_zero", s)) - auc_of(_pilot_curve("grpo", s)) for s in seeds]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    mde20 = stats.minimum_detectable_effect(sd, 20)
    mde10 = stats.minimum_detectable_effect(sd, 10)
    pilot = written["testbed4_r15/pilot"]
    assert f"Pilot (3 paired seeds, 4000, 4001, 4002): SD of the paired AUC difference {100 * sd:.2f} points" in pilot
    assert f"**{100 * mde20:.2f} points**" in pilot and f"{100 * mde10:.2f} with 10 seeds" in pilot
    gains = [_pilot_curve("grpo", s)[-1] - 0.3 for s in seeds]
    assert f"{100 * sum(gains) / 3:+.1f} [" in written["testbed4_r15/tuning_criteria"]
    assert "**met**" in written["testbed4_r15/tuning_criteria"]
    table = written["testbed4_r15/pilot_methods"]
    for method in plan.pilot_methods:
        if method == "grpo":
            continue
        d = [auc_of(_pilot_curve(method, s)) - auc_of(_pilot_curve("grpo", s)) for s in seeds]
        per_seed = ", ".join(f"{100 * x:+.1f} ({s})" for x, s in zip(d, seeds, strict=True))
        role = "confirmatory" if method in plan.confirmatory_methods else "descriptive"
        mean_cell = f"{100 * sum(d) / 3:+.1f}"
        if role == "descriptive":
            mean_cell = f"**{mean_cell}**"
        assert f"| {method} | {role} | {PEAKS[method]:g} | 3 | " in table
        assert f"| {per_seed} | {mean_cell} |" in table
    assert "no test" in table


def test_the_regimes_blocks_in_the_docs_equal_their_derivation_from_the_committed_csvs() -> None:
    blocks = doc_blocks()
    for regime, plan in p.PLANS.items():
        mine = {k: v for k, v in blocks.items() if k[1].startswith(plan.doc_prefix)}
        assert {name.split("/", 1)[1] for _, name in mine} >= set(regime_report.TITLES), regime
        derived = regime_report.report(plan, plan.docs_dir)
        assert_blocks_derived(mine, derived)  # a phase not run yet: its block must state nothing
        assert plan.docs_dir == p.DOCS / regime


def test_a_regimes_committed_rates_are_the_ones_its_committed_tuning_chooses() -> None:
    from recipe.study.common import analysis

    written = [plan for plan in p.PLANS.values() if plan.learning_rates_file.is_file()]
    if not written:
        pytest.skip("no regime's learning rates are committed yet")
    for plan in written:
        tuning = pd.read_csv(plan.docs_dir / "pilot_runs.csv").query("phase == 'tuning'")
        assert plan.learning_rates() == analysis.choose_learning_rates(plan, tuning)
        assert analysis.edge_extensions(plan, tuning) == {}  # every chosen rate inside its rates run
