"""trainer.metrics_jsonl: one line per step, flushed per step, resume-safe, teed from Tracking."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from recipe.tracking.jsonl import (
    JsonlMetricsWriter,
    JsonlTeeTracking,
    metrics_jsonl_path,
    read_metrics_jsonl,
    val_accuracy,
)
from tests.recipe.copo.copo_batches import composed_config


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_line_per_step_with_scalars_only(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    writer = JsonlMetricsWriter(str(path))
    data = {
        "critic/score/mean": np.float32(0.5),
        "copo/entropy_mean": torch.tensor(1.25),
        "training/global_step": 1,
        "val-core/math/acc/mean@8": 0.25,
        "actor/nan": float("nan"),
        "table": [1, 2],
        "text": "x",
        "vector": torch.ones(3),
    }
    assert writer.write(data, step=1)
    # flushed before close: another reader sees the line now
    (record,) = _lines(path)
    assert record["step"] == 1 and isinstance(record["timestamp"], float)
    assert record["critic/score/mean"] == 0.5 and record["copo/entropy_mean"] == 1.25
    assert record["training/global_step"] == 1 and record["val-core/math/acc/mean@8"] == 0.25
    assert record["actor/nan"] is None
    assert not {"table", "text", "vector"} & set(record)
    assert not writer.write({"a": 1.0}, step=1)  # a step is written once
    writer.write({"a": 2.0}, step=2)
    writer.close()
    assert [r["step"] for r in _lines(path)] == [1, 2]


def test_resume_drops_steps_after_the_checkpoint_and_keeps_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    writer = JsonlMetricsWriter(str(path))
    for step in range(0, 6):
        writer.write({"x": float(step)}, step=step)
    writer.close()
    with open(path, "a") as f:
        f.write('{"step": 6, "x": ')  # torn line from a crash
    writer = JsonlMetricsWriter(str(path), resume_step=3)
    assert not writer.write({"x": 30.0}, step=3)  # step 3 is already recorded
    writer.write({"x": 4.5}, step=4)
    writer.close()
    records = _lines(path)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    assert records[-1]["x"] == 4.5
    backups = list(tmp_path.glob("metrics.jsonl.bak-*"))
    assert len(backups) == 1 and '"step": 5' in backups[0].read_text()


def test_fresh_run_over_an_old_file_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "x": 1}\n{"step": 1, "x": 1}\n')
    writer = JsonlMetricsWriter(str(path), resume_step=0)
    writer.write({"x": 2.0}, step=0)
    writer.close()
    assert [(r["step"], r["x"]) for r in _lines(path)] == [(0, 2.0)]


class _Tracking:
    def __init__(self) -> None:
        self.logged: list[tuple[dict, int]] = []
        self.finished = None
        self.extra = "attr"

    def log(self, data, step, backend=None):
        self.logged.append((dict(data), step))

    def finish(self, exit_code=0):
        self.finished = exit_code


def test_tee_forwards_to_tracking(tmp_path: Path) -> None:
    inner = _Tracking()
    tee = JsonlTeeTracking(inner, str(tmp_path / "m.jsonl"))
    tee.log(data={"a": 1.0}, step=7)
    tee.finish(exit_code=1)
    assert inner.logged == [({"a": 1.0}, 7)] and inner.finished == 1 and tee.extra == "attr"
    assert _lines(tmp_path / "m.jsonl")[0]["a"] == 1.0


def test_config_key_default_and_disable() -> None:
    config = composed_config("trainer.default_local_dir=/ck")
    assert metrics_jsonl_path(config) == "/ck/metrics.jsonl"
    assert metrics_jsonl_path(composed_config("trainer.metrics_jsonl=null")) is None
    assert metrics_jsonl_path(composed_config("trainer.metrics_jsonl=''")) is None


def test_reader_skips_the_line_being_written_and_flattens_file_logger_rows(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "critic/score/mean": 0.5}, {"step": 2, "data": {"critic/score/mean": 0.625}}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step": 3, "crit')  # line being written
    assert read_metrics_jsonl(path) == [rows[0], {"step": 2, "critic/score/mean": 0.625}]
    assert read_metrics_jsonl(tmp_path / "missing.jsonl") == []


def test_validation_accuracy_is_the_mean_over_sources() -> None:
    row = {
        "step": 0,
        "val-core/a/acc/mean@1": 0.25,
        "val-core/b/acc/mean@1": 0.75,
        "val-aux/a/score/mean@1": 9,
    }
    assert val_accuracy(row) == pytest.approx(0.5)
    assert val_accuracy({"step": 0, "val-core/a/reward/mean@4": 0.5}) == pytest.approx(0.5)
    assert val_accuracy({"step": 3, "critic/score/mean": 1.0}) is None
