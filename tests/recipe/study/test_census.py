"""Step-0 group census (recipe/study/census.py and `study_cpu.py census`, recipe/study/smollm2.py), no model."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from data_prep import cli as data_prep_cli
from recipe.evaluation.backends import Backend, Completion
from recipe.study import smollm2 as study
from recipe.study.census import census_markdown, census_rows, write_census_subset


def _samples(dataset: str, groups: list[list[bool]]) -> list[dict]:
    return [
        {"dataset": dataset, "problem_id": str(p), "correct": c, "sample_index": i}
        for p, group in enumerate(groups)
        for i, c in enumerate(group)
    ]


def test_census_rows_match_hand_counts() -> None:
    t, f = True, False
    samples = _samples("rg/easy", [[t, t, t, t], [f, f, f, f], [t, f, t, f], [t, t, t, t]])
    samples += _samples("rg/hard", [[f, f, f, f], [f, f, f, t]])
    rows = {r["dataset"]: r for r in census_rows(reversed(samples))}  # order of samples is irrelevant
    assert rows["rg/easy"] == {
        "dataset": "rg/easy",
        "groups": 4,
        "k": 4,
        "accuracy": 10 / 16,
        "frac_all_correct": 2 / 4,
        "frac_all_wrong": 1 / 4,
        "frac_mixed": 1 / 4,
    }
    assert rows["rg/hard"]["accuracy"] == 1 / 8
    assert (rows["rg/hard"]["frac_all_correct"], rows["rg/hard"]["frac_all_wrong"]) == (0.0, 0.5)
    assert rows["all"] == {
        "dataset": "all",
        "groups": 6,
        "k": 4,
        "accuracy": 11 / 24,
        "frac_all_correct": 2 / 6,
        "frac_all_wrong": 2 / 6,
        "frac_mixed": 2 / 6,
    }
    assert list(r["dataset"] for r in census_rows(samples)) == ["rg/easy", "rg/hard", "all"]
    table = census_markdown(census_rows(samples)).splitlines()
    assert table[2] == "| easy | 4 | 4 | 62.5 | 50.0 | 25.0 | 25.0 |"
    assert table[-1] == "| **all** | 6 | 4 | 45.8 | 33.3 | 33.3 | 33.3 |"


def test_census_rows_reject_no_samples() -> None:
    with pytest.raises(ValueError, match="no samples"):
        census_rows([])


def test_subset_takes_the_first_rows_of_each_task(tmp_path: Path) -> None:
    frame = pd.DataFrame({"data_source": list("abababa"), "value": range(7)})
    frame.to_parquet(tmp_path / "train.parquet")
    subset = write_census_subset(tmp_path / "train.parquet", 3, tmp_path / "out" / "census.parquet")
    assert subset["value"].tolist() == [0, 1, 2, 3, 4, 5]  # a: 0, 2, 4 (not 6); b: 1, 3, 5
    assert pd.read_parquet(tmp_path / "out" / "census.parquet").equals(subset)
    with pytest.raises(ValueError, match=r"\{'b': 3\}.*lower --per-task"):
        write_census_subset(tmp_path / "train.parquet", 4, tmp_path / "x.parquet")


class _PatternBackend(Backend):
    """Answers the i-th prompt of each call with CORRECT[i % 3] right answers out of n."""

    name = "pattern"
    CORRECT = (0, 4, 1)

    def __init__(self, answers: dict[str, str]):
        self.answers = answers

    def generate(self, prompts, n, sampling, on_progress=None):
        out = []
        for i, messages in enumerate(prompts):
            gold = self.answers[messages[-1]["content"]]
            right = self.CORRECT[i % 3]
            texts = [f"\\boxed{{{gold}}}" if j < right else "\\boxed{-987654}" for j in range(n)]
            out.append([Completion(text=t, num_tokens=3) for t in texts])
        if on_progress:
            on_progress(len(prompts) * n)
        return out


def test_census_command_end_to_end(tmp_path: Path) -> None:
    data = tmp_path / "data"
    argv = ["reasoning_gym", "--out", str(data), "--tasks", "basic_arithmetic@easy,chain_sum@hard"]
    assert data_prep_cli.main([*argv, "--size", "20", "--val-size", "2", "--seed", "3"]) == 0
    train = pd.read_parquet(data / "train.parquet")
    answers = {
        row["prompt"][-1]["content"]: row["reward_model"]["ground_truth"] for _, row in train.iterrows()
    }

    model = tmp_path / "model"  # the fake backend loads nothing; discovery wants an HF folder
    model.mkdir()
    (model / "config.json").write_text("{}")
    args = study.build_parser().parse_args(
        ["census", "--model", str(model), "--data", str(data), "--per-task", "6"]
        + ["--out", str(tmp_path / "census"), "--docs", str(tmp_path / "docs")]
    )
    assert study.cmd_census(args, backend_factory=lambda *a, **k: _PatternBackend(answers)) == 0

    with open(tmp_path / "docs" / "census.csv", newline="") as f:
        rows = {r["dataset"]: r for r in csv.DictReader(f)}
    # 6 prompts per task, patterns 0/4, 4/4, 1/4 right: 2 all wrong, 2 all correct, 2 mixed each
    for name in ("reasoning_gym/basic_arithmetic@easy", "reasoning_gym/chain_sum@hard", "all"):
        row = rows[name]
        assert row["k"] == "4"
        assert float(row["frac_all_correct"]) == pytest.approx(1 / 3)
        assert float(row["frac_all_wrong"]) == pytest.approx(1 / 3)
        assert float(row["accuracy"]) == pytest.approx(5 / 12)
    assert rows["all"]["groups"] == "12"
    assert "| **all** | 12 | 4 | 41.7 | 33.3 | 33.3 | 33.3 |" in (tmp_path / "docs" / "census.md").read_text()


def test_census_help_runs() -> None:
    with pytest.raises(SystemExit) as exit_info:
        study.build_parser().parse_args(["census", "--help"])
    assert exit_info.value.code == 0
