"""scripts/plot_run.py and the metric readers behind it, on fixture metrics files."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from recipe.tracking import plots as plot_run
from recipe.tracking.training import (
    COPO_DIAGNOSTICS,
    read_eval_summary,
    read_jsonl_metrics,
    read_training_metrics,
    validation_accuracy,
)
from tests.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "metrics"
COPO = FIXTURES / "copo_run.jsonl"
GRPO = FIXTURES / "grpo_run_verl_filelogger.jsonl"
EVAL = FIXTURES / "eval_summary.csv"


def _raw_records(path: Path) -> list[dict]:
    records = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # the fixture's torn last line
            records.append(json.loads(line))
    return records


def _assert_real_png(path: Path) -> None:
    import matplotlib.image as mpimg

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    image = mpimg.imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 200
    assert float(image[..., :3].std()) > 0.01  # not a blank canvas


def test_jsonl_flat_and_verl_filelogger_forms() -> None:
    copo = read_jsonl_metrics(COPO)
    for record in _raw_records(COPO):
        for key, value in record.items():
            if key not in ("step", "timestamp"):
                assert copo[key][record["step"]] == pytest.approx(value)
    assert 7 not in copo["signal/frac_groups_all_correct"]  # the torn last line is skipped
    assert "timestamp" not in copo

    grpo = read_jsonl_metrics(GRPO)
    for record in _raw_records(GRPO):
        for key, value in record["data"].items():
            assert grpo[key][record["step"]] == pytest.approx(value)
    assert not any(key.startswith("copo/") for key in grpo)


def test_validation_keys_with_slashes_in_data_source() -> None:
    val = validation_accuracy(read_jsonl_metrics(COPO))
    assert sorted(val) == ["HuggingFaceH4/MATH-500", "gsm8k"]
    math = val["HuggingFaceH4/MATH-500"]
    assert sorted(math) == ["maj@8", "mean@8"]  # acc only: the score/mean@8 aux key is not accuracy
    assert math["mean@8"] == {1: 0.42, 2: 0.44, 4: 0.48, 6: 0.52}
    assert math["maj@8"][6] == pytest.approx(0.57)


def test_tensorboard_events_read_back(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    expected = read_jsonl_metrics(COPO)
    writer = SummaryWriter(str(tmp_path / "tb" / "copo"))  # as verl's _TensorboardAdapter logs
    for record in _raw_records(COPO):
        for key, value in record.items():
            if key not in ("step", "timestamp"):
                writer.add_scalar(key, value, record["step"])
    writer.close()
    got = read_training_metrics(tmp_path / "tb")
    assert got.keys() == expected.keys()
    for key, series in expected.items():
        assert got[key].keys() == series.keys()
        for step, value in series.items():
            assert got[key][step] == pytest.approx(value, rel=1e-6)  # stored as float32

    out = plot_run.main(["--run", f"COPO={tmp_path / 'tb'}", "--out", str(tmp_path / "fig")])
    assert {p.name for p in out} >= {"accuracy.png", "copo_diagnostics.png"}


def test_eval_summary_curves_skip_unstepped_rows() -> None:
    curves = read_eval_summary(EVAL)
    assert sorted(curves) == ["HuggingFaceH4/MATH-500", "aime24"]
    assert curves["HuggingFaceH4/MATH-500"]["mean@8"] == {10: 0.55, 20: 0.60}  # "base" has no step
    assert curves["aime24"]["maj@64"] == {10: 0.15, 20: 0.18}
    assert curves["aime24"]["pass@64"] == {10: 0.40, 20: 0.45}


def test_plot_run_writes_non_empty_pngs(tmp_path: Path) -> None:
    out = tmp_path / "figures"
    written = plot_run.main(
        ["--run", f"COPO={COPO}", "--run", f"GRPO={GRPO}", "--eval", f"COPO={EVAL}", "--out", str(out)]
    )
    names = sorted(p.name for p in written)
    assert names == sorted(
        [
            "accuracy.png",
            "accuracy_HuggingFaceH4_MATH-500.png",
            "accuracy_aime24.png",
            "accuracy_gsm8k.png",
            "copo_diagnostics.png",
        ]
    )
    for path in written:
        assert path.parent == out
        _assert_real_png(path)


def test_plot_run_without_copo_metrics_draws_accuracy_only(tmp_path: Path, capsys) -> None:
    written = plot_run.main(["--run", f"GRPO={GRPO}", "--out", str(tmp_path)])
    assert "copo_diagnostics.png" not in {p.name for p in written}
    assert "no copo/* diagnostics" in capsys.readouterr().out
    _assert_real_png(tmp_path / "accuracy.png")
    assert len(COPO_DIAGNOSTICS) == 6


def test_plot_run_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="at least one"):
        plot_run.main(["--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="does not exist"):
        plot_run.main(["--run", f"X={tmp_path / 'missing.jsonl'}"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit, match="no metrics JSONL"):
        plot_run.main(["--run", f"X={empty}", "--out", str(tmp_path)])
