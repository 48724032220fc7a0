"""Testbed v4's confirmatory report per regime (``<regime> summarize``) and the regime map across the
regimes with its "When to use COPO" block, on synthetic runs and CSVs; every number re-derived here by
a loop (paired differences, Holm step-down), the intervals from ``recipe.stats``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recipe import stats
from recipe.study.common import cli
from recipe.study.testbed4 import plan as p
from recipe.study.testbed4 import regime_map, regime_report
from recipe.study.testbed4 import report as t4_report
from tests.recipe.study.fake_runs import auc_of, regime_cli_sandbox, write_run

THREE = ("grpo", "copo_soft_with_zero", "copo_variant_nonpositive")
TARGETS = {r.name: r.all_wrong for r in p.REGIMES}


# per regime and method: the AUC shift against GRPO; per seed a shared level plus a method-specific wobble
EFFECTS = {
    "r15": {"grpo": 0.0, "copo_soft_with_zero": -0.03, "copo_variant_nonpositive": 0.02},  # the variant helps
    "r40": {"grpo": 0.0, "copo_soft_with_zero": 0.0, "copo_variant_nonpositive": 0.0},  # nothing differs
    "r65": {"grpo": 0.0, "copo_soft_with_zero": 0.04, "copo_variant_nonpositive": 0.02},  # the paper's helps most
}
SEEDS = tuple(range(400, 406))


def _auc(regime: str, method: str, seed: int) -> float:
    wobble = {"grpo": 0.0, "copo_soft_with_zero": 0.004, "copo_variant_nonpositive": -0.003}[method]
    sign = 1 if seed % 2 else -1
    return 0.4 + 0.01 * (seed - 400) + EFFECTS[regime][method] + sign * wobble * (1 + (seed - 400) % 3)


def _write_csvs(docs: Path, regimes: tuple[str, ...] = ("r15", "r40", "r65")) -> None:
    for regime in regimes:
        rows = [
            {"run": f"{m}-s{s}", "phase": "confirmatory", "trainer": "fast", "method": m, "seed": s, "lr": 2e-4,
             "steps": 90, "start": 0.3, "final": _auc(regime, m, s) + 0.05, "auc": _auc(regime, m, s)}
            for s in SEEDS for m in THREE
        ]  # fmt: skip
        (docs / regime).mkdir(parents=True)
        pd.DataFrame(rows).to_csv(docs / regime / "runs.csv", index=False)


def test_the_regime_map_and_when_to_use_from_synthetic_csvs(tmp_path: Path) -> None:
    _write_csvs(tmp_path)
    rows = regime_map.regime_map(p.PLANS, TARGETS, tmp_path)
    assert rows is not None
    # the primary comparison per regime, Holm over the three regimes (Holm's arithmetic: tests/recipe/test_stats_paired.py)
    primary = {}
    for regime in ("r15", "r40", "r65"):
        d = [_auc(regime, "copo_soft_with_zero", s) - _auc(regime, "grpo", s) for s in SEEDS]
        primary[regime] = stats.paired_t(d)
        assert sum(d) / len(d) == pytest.approx(primary[regime].mean)
    holm3 = dict(zip(primary, stats.holm([t.p for t in primary.values()]), strict=True))
    table = regime_map.regime_map_markdown(rows)
    for regime, t in primary.items():
        line = next(x for x in table.splitlines() if x.startswith(f"| {regime} |"))
        pv = "< 0.001" if holm3[regime] < 0.001 else f"{holm3[regime]:.3f}"
        assert f"| {100 * t.mean:+.1f} [{100 * t.low:+.1f}, {100 * t.high:+.1f}] |" in line
        assert f"| {pv} |" in line and f"| {100 * TARGETS[regime]:.0f} | {len(SEEDS)} |" in line
        # the variant's two comparisons, Holm within the regime
        tests = [
            stats.paired_t([_auc(regime, "copo_variant_nonpositive", s) - _auc(regime, c, s) for s in SEEDS])
            for c in ("grpo", "copo_soft_with_zero")
        ]
        for test, h in zip(tests, stats.holm([x.p for x in tests]), strict=True):
            row = next(r for r in rows if r.regime == regime and r.family == "secondary" and r.p == test.p)
            assert row.holm_p == pytest.approx(h) and row.mean == pytest.approx(test.mean)
    use = regime_map.when_to_use_markdown(rows)
    picks = {line.split(":")[0].strip("| "): line.rsplit("`", 2)[1] for line in use.splitlines()
             if line.startswith("| r")}  # fmt: skip
    assert picks == {"r15": "copo_variant_nonpositive", "r40": "grpo", "r65": "copo_soft_with_zero"}
    # the testbed's report states both blocks from the folder, and none while a regime is missing
    fragments = t4_report.report(tmp_path)
    assert fragments["regime_map"] == table and fragments["when_to_use"] == use
    from recipe.study.testbed4 import map_plot

    map_plot.plot_regime_map(rows, tmp_path / "regime_map.png")
    assert (tmp_path / "regime_map.png").read_bytes()[:4] == b"\x89PNG"
    partial_docs = tmp_path / "partial"
    _write_csvs(partial_docs, ("r15", "r40"))
    assert regime_map.fragments(p.PLANS, TARGETS, partial_docs) == {}


def test_a_regimes_summarize_collects_its_confirmatory_runs_and_states_the_comparisons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from recipe.study.common import analysis
    from recipe.study.testbed4 import cli as t4_cli

    plan = replace(
        p.PLANS["r65"],
        learning_rates_file=tmp_path / "rates.json",
        confirmatory_seeds=SEEDS[:4],
        docs_folder=tmp_path / "docs" / "r65",
    )
    plan.learning_rates_file.write_text(json.dumps({"learning_rates": dict.fromkeys(plan.methods, 2e-4)}))
    written = regime_cli_sandbox(tmp_path, monkeypatch, "testbed4_r65/max")
    monkeypatch.setattr(analysis, "RESAMPLES", 200)
    rng = np.random.default_rng(0)
    curves = {}
    for seed in plan.confirmatory_seeds:
        for i, method in enumerate(plan.confirmatory_methods):
            correct = rng.integers(0, 5, size=(4, 4))
            correct[1:] = np.minimum(4, correct[1:] + i)  # the later methods of the tuple gain more
            curve = list(correct.mean(axis=1) / 4)
            curves[(method, seed)] = curve
            write_run(tmp_path / "runs" / "confirmatory" / f"{method}-s{seed}", "testbed4_r65/max", curve,
                      correct=correct)  # fmt: skip
    (tmp_path / "docs" / "r65").mkdir(parents=True)
    args = argparse.Namespace(runs=tmp_path / "runs", docs=tmp_path / "docs" / "r65")
    study = cli.Study(plan, partial(regime_report.report, plan), regime_report.summary_markdown)
    assert t4_cli.summarize_regime(study, args) == 0
    assert {"testbed4_r65/comparisons", "testbed4_r65/methods", "testbed4_r65/criteria"} <= set(written)
    d = [auc_of(curves[("copo_soft_with_zero", s)]) - auc_of(curves[("grpo", s)]) for s in plan.confirmatory_seeds]
    t = stats.paired_t(d)
    assert f"{100 * t.mean:+.1f} [{100 * t.low:+.1f}, {100 * t.high:+.1f}] points" in written["testbed4_r65/comparisons"]
    methods = written["testbed4_r65/methods"]
    assert all(f"| {m} | 4 | 0.0002 |" in methods for m in plan.confirmatory_methods)
    assert "copo_soft |" not in methods  # descriptive methods are not confirmatory
    assert (args.docs / "summary.md").read_text() == regime_report.summary_markdown(regime_report.report(plan, args.docs))
    assert (args.docs / "problems.csv").is_file() and (args.docs / "testbed4_r65_accuracy.png").is_file()
