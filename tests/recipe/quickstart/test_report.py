"""recipe.quickstart.report: the per-step line, the verdict and the paired before/after comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipe.quickstart import report
from recipe.quickstart.run import VAL_DIR


def test_validation_comparison_pairs_prompts_across_dumps(tmp_path: Path) -> None:
    val = tmp_path / VAL_DIR
    val.mkdir()
    # q5 appears twice (a validation set may repeat a problem): both copies are kept, in order
    rows0 = [{"input": f"q{min(i, 5)}", "score": float(i < 2)} for i in range(7)]
    rows3 = [{"input": f"q{min(i, 5)}", "score": float(i in (0, 3, 4, 6))} for i in range(7)]
    (val / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows0))
    (val / "3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows3))
    got = report.validation_comparison(val, steps=3)
    assert got["prompts"] == 7 and got["improved"] == 3 and got["worsened"] == 1
    assert got["before"] == pytest.approx(2 / 7) and got["after"] == pytest.approx(4 / 7)
    assert report.validation_comparison(val, steps=4) is None


def test_validation_verdict_names_what_is_missing() -> None:
    assert report.validation_verdict(0.2, 0.3, (0.01, 0.2)) == "improved"
    assert report.validation_verdict(0.2, 0.3, (-0.05, 0.2)).startswith("higher, but within noise")
    assert report.validation_verdict(0.2, 0.3).startswith("higher (no per-prompt scores")
    assert report.validation_verdict(0.3, 0.3).startswith("did not improve")
    assert report.validation_verdict(None, 0.3).startswith("no validation before training")
    assert report.validation_verdict(0.2, None).startswith("no validation after training")


def test_progress_line() -> None:
    rows = [
        {"step": 1, "critic/score/mean": 0.5, "signal/frac_groups_zero_variance": 0.25, "actor/entropy": 1.5},
        {"step": 2, "critic/score/mean": 0.625, "timing_s/step": 12.0},
    ]
    line = report.progress_line(rows[0], total=4, step_times=[])
    assert "step 1/4" in line and "reward 0.500" in line and "acc 0.500" in line
    assert "zero-var 0.25" in line and "token-entropy 1.500" in line
    assert "ETA n/as" in line
    line = report.progress_line(rows[1], total=4, step_times=[10.0, 12.0])
    assert "step 12.0s" in line and "ETA 22s" in line  # mean 11 s x 2 steps left
