"""recipe/study/testbed/analysis.py on hand-made run folders: per-run statistics, per-method CIs,
paired differences, the signal table, the markdown, and the plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from recipe import stats
from recipe.study.testbed import analysis

VAL = "val-core/testbed/add2x2/acc/mean@1"
OTHER = "val-core/testbed/add3x3/acc/mean@1"


def _write_run(
    runs: Path, name: str, curve: dict[int, float], nonzero: float = 0.5, wall: float = 100.0
) -> None:
    """A finished run: validation (two equal sources) at the curve's steps, a training row at every step."""
    out = runs / name
    out.mkdir(parents=True)
    lines = []
    for step in range(0, max(curve) + 1):
        row: dict = {"step": step}
        if step in curve:
            row.update({VAL: curve[step], OTHER: curve[step]})
            if step > 0:
                row["timing_s/testing"] = 2.0
        if step > 0:
            row.update(
                {
                    "critic/score/mean": 0.5,
                    "signal/frac_nonzero_adv": nonzero,
                    "signal/frac_groups_all_correct": 0.25,
                    "signal/frac_groups_all_wrong": 0.5,
                    "signal/frac_groups_zero_variance": 0.75,
                    "signal/num_responses": 64.0,
                    "signal/num_groups": 16.0,
                    "timing_s/step": 3.0,
                }
            )
        lines.append(json.dumps(row))
    (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps({"steps": max(curve), "wall_s": wall}))


# grpo: flat; copo_soft: +10 points at the end for every seed; dapo_filter: mixed signs
CURVES = {
    "grpo": [{0: 0.30, 5: 0.30, 10: 0.32}, {0: 0.30, 5: 0.31, 10: 0.30}, {0: 0.30, 5: 0.30, 10: 0.34}],
    "copo_soft": [{0: 0.30, 5: 0.36, 10: 0.42}, {0: 0.30, 5: 0.33, 10: 0.40}, {0: 0.30, 5: 0.40, 10: 0.44}],
    "dapo_filter": [{0: 0.30, 5: 0.20, 10: 0.22}, {0: 0.30, 5: 0.36, 10: 0.40}, {0: 0.30, 5: 0.30, 10: 0.34}],
}


@pytest.fixture()
def runs(tmp_path: Path) -> Path:
    for method, curves in CURVES.items():
        for seed, curve in enumerate(curves):
            _write_run(
                tmp_path / "runs", f"{method}-s{seed}", curve, nonzero=0.25 if method == "grpo" else 0.75
            )
    _write_run(tmp_path / "runs", "copo_global_only-s0", {0: 0.3, 5: 0.3, 10: 0.3})
    (tmp_path / "runs" / "copo_global_only-s0" / "summary.json").unlink()  # unfinished: left out
    return tmp_path / "runs"


def test_run_statistics_hand_checked(runs: Path) -> None:
    loaded = analysis.load_runs(runs, ["copo_soft", "copo_global_only"], [0])
    assert [(r.method, r.seed) for r in loaded] == [("copo_soft", 0)]
    row = analysis.run_statistics(loaded[0], threshold_gain=0.05, test_freq=5)
    assert row["start_acc"] == pytest.approx(0.30) and row["final_acc"] == pytest.approx(0.42)
    # trapezoids: (0.30 + 0.36) / 2 * 5 + (0.36 + 0.42) / 2 * 5 = 3.6, over 10 steps
    assert row["auc"] == pytest.approx(0.36)
    assert row["threshold"] == pytest.approx(0.35)
    assert row["steps_to_threshold"] == 5.0 and row["reached_threshold"]
    assert row["mean_step_s"] == 3.0 and row["train_s"] == 30.0 and row["val_s_each"] == 2.0
    assert row["run_wall_s"] == 100.0

    flat = analysis.load_runs(runs, ["grpo"], [1])[0]
    censored = analysis.run_statistics(flat, threshold_gain=0.05, test_freq=5)
    assert not censored["reached_threshold"] and censored["steps_to_threshold"] == 15.0  # budget + interval


def test_method_summary_cis_and_paired_differences(runs: Path, tmp_path: Path) -> None:
    methods = ["grpo", "copo_soft", "dapo_filter", "copo_global_only"]
    result = analysis.summarize(runs, tmp_path / "docs", methods, [0, 1, 2], test_freq=5, threshold_gain=0.05)
    rows = {(r["method"], r["statistic"]): r for r in result["summary"]}
    assert {m for m, _ in rows} == {"grpo", "copo_soft", "dapo_filter"}

    final = rows[("copo_soft", "final_acc")]
    expected = stats.bootstrap_ci([0.42, 0.40, 0.44])
    assert (final["mean"], final["ci_low"], final["ci_high"]) == pytest.approx(
        (expected.mean, expected.low, expected.high)
    )
    # paired by seed: 0.42-0.32, 0.40-0.30, 0.44-0.34 = 0.10 each -> CI [0.10, 0.10], significant
    assert final["diff_mean"] == pytest.approx(0.10)
    assert final["diff_low"] == pytest.approx(0.10) and final["diff_high"] == pytest.approx(0.10)
    assert final["significant"] is True and final["paired_seeds"] == 3
    # dapo_filter: differences -0.10, +0.10, 0.00 -> the CI contains 0
    dapo = rows[("dapo_filter", "final_acc")]
    assert dapo["diff_mean"] == pytest.approx(0.0, abs=1e-12) and dapo["significant"] is False
    assert "diff_mean" not in rows[("grpo", "final_acc")]
    steps = rows[("grpo", "steps_to_threshold")]
    assert steps["reached"] == 0 and steps["mean"] == 15.0  # every GRPO run censored

    signal = {r["method"]: r for r in result["signal"]}
    assert signal["grpo"]["frac_nonzero_adv"] == pytest.approx(0.25)
    assert signal["copo_soft"]["generated_per_useful"] == pytest.approx(1 / 0.75)
    assert signal["grpo"]["train_s"] == 30.0 and signal["grpo"]["run_wall_s"] == 100.0

    md = (tmp_path / "docs" / "summary.md").read_text()
    assert "| copo_soft | 3 | 42.0 [" in md
    assert "+10.0 [+10.0, +10.0] *" in md
    assert (
        "copo_soft vs grpo, final accuracy: +10.0 points [+10.0, +10.0] over 3 paired seeds: significant"
        in md
    )
    dapo_line = next(
        line for line in md.splitlines() if line.startswith("- dapo_filter vs grpo, final accuracy")
    )
    assert dapo_line.endswith("not significant (the 95% CI contains 0).")
    with open(tmp_path / "docs" / "runs.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 9
    with open(tmp_path / "docs" / "steps.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 9 * 11


def test_plots_have_ci_bands(runs: Path, tmp_path: Path) -> None:
    from recipe.study.plots import ci_band, curves, paired_curves, plot_testbed, read_steps
    from recipe.tracking.plots import setup_matplotlib

    analysis.summarize(runs, tmp_path / "docs", ["grpo", "copo_soft"], [0, 1, 2], test_freq=5)
    rows = read_steps(tmp_path / "docs" / "steps.csv")
    acc = curves(rows, "step", "val_acc")
    steps, mean, low, high = ci_band(acc["copo_soft"])
    assert steps == [0, 5, 10]
    assert mean == pytest.approx([0.30, 0.3633333, 0.42])
    assert low[0] == high[0] == pytest.approx(0.30)
    diff = paired_curves(acc, "grpo")
    assert set(diff) == {"copo_soft"}
    assert ci_band(diff["copo_soft"])[1] == pytest.approx([0.0, (0.06 + 0.02 + 0.10) / 3, 0.10])
    written = plot_testbed(tmp_path / "docs" / "steps.csv", tmp_path / "fig", setup_matplotlib)
    assert [p.name for p in written] == ["testbed_accuracy.png", "testbed_signal.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)


def test_a_run_without_step0_validation_is_an_error(tmp_path: Path) -> None:
    _write_run(tmp_path, "grpo-s0", {0: 0.3, 5: 0.4})
    lines = (tmp_path / "grpo-s0" / "metrics.jsonl").read_text().splitlines()
    (tmp_path / "grpo-s0" / "metrics.jsonl").write_text("\n".join(lines[1:]) + "\n")
    (run,) = analysis.load_runs(tmp_path, ["grpo"], [0])
    with pytest.raises(ValueError, match="validation at step 0"):
        analysis.run_statistics(run, 0.05, 5)


def test_one_paired_seed_gets_no_verdict() -> None:
    # A pilot with one seed per method: the difference has no interval, so no claim either way.
    row = {"method": "copo_soft", "statistic": "final_acc", "diff_mean": 0.02, "diff_low": 0.02}
    row |= {"diff_high": 0.02, "paired_seeds": 1, "significant": False}
    (line,) = analysis.significance_lines([row])
    assert line.endswith("no verdict (an interval needs at least 2 paired seeds).")
    assert " significant" not in line
