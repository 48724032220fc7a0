"""The mechanism's collection (``recipe.study.common.mechanism``): the fast runs' ``mechanism/`` metrics
pooled per (phase, method, step) into ``mechanism.csv``; runs from before the metrics write no file and
leave every other CSV as it was."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from copo_core import wrong_answer_metrics
from recipe.study.common import collect
from recipe.study.common.collect import PlannedRun, ValProblem
from recipe.study.common.mechanism import mechanism_markdown, mechanism_rows
from recipe.study.testbed3.plan import PLAN
from recipe.tracking import names
from tests.recipe.study.test_testbed3 import _fake_run

SCORES = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
INDEX = [0, 0, 0, 0, 1, 1, 2, 2]  # 3 of 4 right; 1 of 2; all wrong


def _step_metrics(wrong_adv: float) -> dict[str, float]:
    """A step's mechanism/ metrics: every wrong answer gets ``wrong_adv``, the right ones 1."""
    adv = torch.where(SCORES > 0, 1.0, wrong_adv)[:, None]
    return names.prefixed(
        names.MECHANISM_PREFIX, wrong_answer_metrics(adv, torch.ones_like(adv), SCORES, INDEX)
    )


def _add_mechanism(path: Path, wrong_adv: float) -> None:
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        if row["step"] > 0:
            row.update({k: (None if math.isnan(v) else v) for k, v in _step_metrics(wrong_adv).items()})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_seeds_pool_by_their_counts(tmp_path: Path) -> None:
    runs = []
    for seed, wrong_adv in ((0, -0.5), (1, 0.25)):
        path = tmp_path / f"copo_soft_with_zero-s{seed}"
        _fake_run(path, seed, 0.25)
        _add_mechanism(path, wrong_adv)
        runs.append(PlannedRun("confirmatory", "fast", "copo_soft_with_zero", seed, 1e-4, path))
    rows = mechanism_rows(runs)
    assert [r["step"] for r in rows] == list(range(1, 21)) and {r["seeds"] for r in rows} == {2}
    row = rows[0]
    assert (
        row["frac_groups_all_wrong"],
        row["frac_groups_mixed"],
        row["frac_groups_all_correct"],
    ) == pytest.approx((1 / 3, 2 / 3, 0.0))
    # two wrong answers of the all-wrong group per seed: the pooled mean is the seeds' mean
    assert row["wrong_adv_all_wrong"] == pytest.approx(-0.125) and row["num_wrong_all_wrong"] == 4
    assert row["wrong_adv_mixed_s075_100"] == pytest.approx(-0.125) and row["num_wrong_mixed_s075_100"] == 2
    assert math.isnan(row["wrong_adv_mixed_s000_025"]) and row["num_wrong_mixed_s000_025"] == 0
    table = mechanism_markdown(PLAN, pd.DataFrame(rows))
    assert "| copo_soft_with_zero | 33.3 | 66.7 | 0.0 | -0.125 |" in table


def test_old_runs_write_no_mechanism_csv_and_keep_the_other_columns(tmp_path: Path) -> None:
    problems = [ValProblem(i, "max", "max2x2" if i < 4 else "max3x3") for i in range(8)]
    columns = {}
    for with_metrics in (False, True):
        out = tmp_path / f"docs{with_metrics}"
        runs = []
        for method in PLAN.methods:
            path = tmp_path / f"runs{with_metrics}" / f"{method}-s3"
            _fake_run(path, 3, 0.25)
            if with_metrics:
                _add_mechanism(path, -0.5)
            runs.append(PlannedRun("pilot", "fast", method, 3, 1e-4, path))
        written = collect.collect(PLAN, runs, problems, out, prefix="pilot_")
        assert (out / "pilot_mechanism.csv").is_file() == with_metrics == bool(written["mechanism"])
        columns[with_metrics] = {
            p.name: list(pd.read_csv(p).columns) for p in out.glob("*.csv") if "mechanism" not in p.name
        }
    assert columns[False] == columns[True]
    mechanism = pd.read_csv(tmp_path / "docsTrue" / "pilot_mechanism.csv")
    assert set(mechanism.method) == set(PLAN.methods) and (mechanism.wrong_adv_all_wrong == -0.5).all()
