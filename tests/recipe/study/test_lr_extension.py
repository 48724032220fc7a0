"""The learning-rate rule's extension beyond the grid's edge (testbed v4; docs/STUDY_PLAN.md, "Learning
rates"): the chain of rates on synthetic AUCs, the ``tune`` phase's rounds on synthetic run folders,
and ``pilot-summarize`` refusing while an extension is owed."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from recipe.study.common import cli, rates
from recipe.study.common.jobs import run_name
from recipe.study.testbed.build import Testbed as TB
from recipe.study.testbed4 import plan as p
from tests.recipe.study.fake_runs import write_run

GRID = (1e-4, 2e-4, 4e-4)


def _peaked(peak: float) -> Any:
    """An AUC that falls with the distance (in octaves) from ``peak``."""
    return lambda lr: 0.5 - 0.01 * abs(math.log2(lr / peak))


def _converge(grid: tuple[float, ...], auc: Any) -> tuple[list[float], int]:
    """The ``tune`` phase's loop, by hand: run every unfinished rate of the chain, look again, until the
    chain stops growing. Returns the chain and the rounds it took."""
    finished: dict[float, float] = {}
    rounds = 0
    while True:
        chain = rates.rate_chain(grid, finished.get, extend=True)
        todo = [lr for lr in chain if lr not in finished]
        if not todo:
            return chain, rounds
        rounds += 1
        finished.update({lr: auc(lr) for lr in todo})


@pytest.mark.parametrize(
    "peak, chain",
    [
        (2e-4, [1e-4, 2e-4, 4e-4]),  # inside: no extension
        (8e-4, [1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3]),  # top edge: 8e-4, then 1.6e-3 to see it fall
        (3.2e-3, [1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3, 3.2e-3, 6.4e-3]),
        (5e-5, [2.5e-5, 5e-5, 1e-4, 2e-4, 4e-4]),  # bottom edge
    ],
)
def test_the_chain_extends_by_two_until_the_chosen_rate_lies_inside(peak: float, chain: list[float]) -> None:
    got, rounds = _converge(GRID, _peaked(peak))
    assert got == pytest.approx(chain, rel=1e-12)
    assert rounds == 1 + len(chain) - len(GRID)  # the grid, then one extension per round
    chosen = rates.best_rate({lr: _peaked(peak)(lr) for lr in got})
    assert chosen == pytest.approx(peak) and min(got) < chosen < max(got)
    assert rates.rate_chain(GRID, _peaked(peak), extend=False) == list(GRID)  # v2/v3: the grid as it is


def test_no_extension_while_a_grid_run_is_unfinished_and_ties_take_the_smaller_rate() -> None:
    aucs = {1e-4: 0.4, 2e-4: 0.5}  # 4e-4 not finished: the best so far sits on an edge, but wait
    assert rates.rate_chain(GRID, aucs.get, extend=True) == list(GRID)
    assert rates.best_rate({1e-4: 0.5, 2e-4: 0.5, 4e-4: 0.3}) == 1e-4
    # a tie at the bottom edge extends downward (the smaller rate is the chosen one)
    assert rates.rate_chain(GRID, {1e-4: 0.5, 2e-4: 0.5, 4e-4: 0.3}.get, extend=True)[0] == 5e-5
    assert rates.beyond_edge(GRID, 2e-4) is None


# ----------------------------------------------------------------------------- the phases on run folders
def _curve(auc_level: float) -> list[float]:
    """A validation curve at steps 0, 30, 60, 90 whose AUC rises with ``auc_level``."""
    return [0.3, 0.3 + auc_level, 0.3 + auc_level, 0.3 + auc_level]


PEAKS = {"grpo": 2e-4, "copo_soft_with_zero": 8e-4, "copo_soft": 1e-4, "dapo_filter": 4e-4,
         "copo_variant_nonpositive": 2e-4}  # fmt: skip


def _fake_tune(plan: Any, runs_done: list[list[str]]) -> Any:
    """A ``run_phase`` that 'runs' each job by writing a finished run whose AUC peaks at PEAKS[method]."""

    def run_phase(jobs: list[Any], args: argparse.Namespace, testbed: TB, phase: str, **_: Any) -> int:
        runs_done.append([f"{phase}: {j.name}" for j in jobs if not (j.out / "summary.json").is_file()])
        for j in jobs:
            if (j.out / "summary.json").is_file():
                continue  # the driver skips finished runs
            method, lr = j.fingerprint["method"], j.fingerprint["lr"]
            write_run(j.out, f"{plan.name}/max", _curve(0.2 - 0.02 * abs(math.log2(lr / PEAKS[method]))))
        return 0

    return run_phase


def test_tune_runs_the_grid_then_each_extension_round_until_every_rate_is_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = p.PLANS["r15"]
    rounds: list[list[str]] = []
    monkeypatch.setattr(cli, "testbed", lambda plan, dry_run=False: TB(tmp_path / "tb", "key"))
    monkeypatch.setattr(cli, "run_phase", _fake_tune(plan, rounds))
    args = argparse.Namespace(runs=tmp_path / "runs", dry_run=False, parallel=2)
    assert cli.cmd_tune(plan, args) == 0
    assert len(rounds[0]) == 15 and all(r.startswith("tuning: ") for r in rounds[0])
    assert rounds[1:] == [
        [
            "tuning extension: copo_soft_with_zero-lr0.0008-s4000",
            "tuning extension: copo_soft-lr5e-05-s4000",
            "tuning extension: dapo_filter-lr0.0008-s4000",  # its peak, 4e-4, on the top edge: 8e-4 shows it
        ],
        ["tuning extension: copo_soft_with_zero-lr0.0016-s4000"],
    ]
    chain = cli.tuning_rates(plan, args.runs / "tuning")
    assert chain["copo_soft_with_zero"] == pytest.approx([1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3])
    assert chain["copo_soft"] == pytest.approx([5e-5, 1e-4, 2e-4, 4e-4])
    assert chain["dapo_filter"] == pytest.approx([1e-4, 2e-4, 4e-4, 8e-4])
    assert chain["grpo"] == list(GRID)
    # run again: nothing left to do (one round, every run already finished)
    rounds.clear()
    assert cli.cmd_tune(plan, args) == 0 and rounds == [[]]
    # v3 (no extension): tune runs its grid once, whatever the runs show
    v3_rounds: list[list[str]] = []
    v3 = replace(p.PLANS["r15"], extend_lr_grid=False)
    monkeypatch.setattr(cli, "run_phase", _fake_tune(v3, v3_rounds))
    assert cli.cmd_tune(v3, argparse.Namespace(runs=tmp_path / "v3", dry_run=False, parallel=2)) == 0
    assert len(v3_rounds) == 1 and len(v3_rounds[0]) == 15


def _val_parquet(path: Path, problems: int = 4) -> None:
    path.parent.mkdir(parents=True)
    pd.DataFrame(
        [{"data_source": "testbed4_r15/max", "extra_info": {"original_id": f"max:{10 + i}|{20 + i}"}}
         for i in range(problems)]
    ).to_parquet(path)  # fmt: skip


def test_pilot_summarize_refuses_while_an_extension_is_owed_and_names_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rates_file = tmp_path / "learning_rates_r15.json"
    plan = replace(p.PLANS["r15"], learning_rates_file=rates_file)
    _val_parquet(tmp_path / "tb" / "data" / "val.parquet")
    monkeypatch.setattr(cli, "testbed", lambda plan, dry_run=False: TB(tmp_path / "tb", "key"))
    runs = tmp_path / "runs"
    for method in plan.methods:  # the grid only
        for lr in GRID:
            level = 0.2 - 0.02 * abs(math.log2(lr / PEAKS[method]))
            write_run(runs / "tuning" / run_name(method, 4000, lr), f"{plan.name}/max", _curve(level))
    study = cli.Study(plan, lambda docs: {}, lambda fragments: "")
    args = argparse.Namespace(runs=runs, docs=tmp_path / "docs")
    (tmp_path / "docs").mkdir()
    with pytest.raises(SystemExit, match="copo_soft_with_zero-lr0.0008-s4000, copo_soft-lr5e-05-s4000, dapo_filter-lr0.0008"):
        cli.cmd_pilot_summarize(study, args)
    assert not rates_file.exists()
    # the extensions run (one round each), then the rates are written, each inside its rates
    rounds: list[list[str]] = []
    monkeypatch.setattr(cli, "run_phase", _fake_tune(plan, rounds))
    assert cli.cmd_tune(plan, argparse.Namespace(runs=runs, dry_run=False, parallel=2)) == 0
    assert cli.cmd_pilot_summarize(study, args) == 0
    written = json.loads(rates_file.read_text())
    assert written["learning_rates"] == pytest.approx(PEAKS) and "edge" in written["rule"]
    tuning = pd.read_csv(tmp_path / "docs" / "pilot_runs.csv")
    assert len(tuning) == 15 + 4 and set(tuning.phase) == {"tuning"}


def test_the_csv_check_names_the_rate_beyond_the_edge() -> None:
    from recipe.study.common import analysis

    plan = p.PLANS["r40"]
    rows = [{"method": m, "lr": lr, "seed": 4000, "auc": 0.5 - (0.1 if lr != 4e-4 else 0.0)}
            for m in plan.methods for lr in GRID]  # fmt: skip
    tuning = pd.DataFrame(rows)
    assert analysis.edge_extensions(plan, tuning) == {m: pytest.approx(8e-4) for m in plan.methods}
    assert analysis.edge_extensions(replace(plan, extend_lr_grid=False), tuning) == {}
