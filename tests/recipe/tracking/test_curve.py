"""The learning-curve figure (``plot_run.py --curve``) and README's copy of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipe.tracking import curve
from recipe.tracking import plots as plot_run
from recipe.tracking.training import read_training_metrics
from tests.paths import REPO

VAL = "val-core/reasoning_gym/chain_sum@easy/acc/mean@1"


def _run(folder: Path, steps: int = 3) -> Path:
    folder.mkdir(parents=True)
    rows = [{"step": 0, VAL: 0.25}]
    rows += [{"step": s, "critic/score/mean": 0.1 * s} for s in range(1, steps + 1)]
    rows.append({"step": steps, VAL: 0.5})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_curve_data_reads_reward_per_step_and_validation_before_after(tmp_path: Path) -> None:
    reward, validation = curve.curve_data(read_training_metrics(_run(tmp_path / "run") / "metrics.jsonl"))
    assert reward == {1: pytest.approx(0.1), 2: pytest.approx(0.2), 3: pytest.approx(0.3)}
    assert validation == {"reasoning_gym/chain_sum@easy": {0: 0.25, 3: 0.5}}


def test_plot_run_curve_writes_a_small_png_from_a_run_folder(tmp_path: Path) -> None:
    written = plot_run.main(["--curve", str(_run(tmp_path / "run")), "--out", str(tmp_path / "fig")])
    assert written == [tmp_path / "fig" / curve.CURVE_FILE]
    data = written[0].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 1_000 < len(data) < 100_000


def test_curve_refuses_metrics_without_a_training_reward(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, VAL: 0.25}) + "\n")
    with pytest.raises(SystemExit, match="critic/score/mean"):
        plot_run.main(["--curve", str(tmp_path / "metrics.jsonl"), "--out", str(tmp_path / "fig")])


def test_readmes_figure_is_committed_and_small() -> None:
    png = REPO / "docs" / "figures" / curve.CURVE_FILE
    assert f"]({png.relative_to(REPO).as_posix()})" in (REPO / "README.md").read_text()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 100_000
