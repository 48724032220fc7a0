"""The offline reasoning-gym generator, end to end through the CLI and against reasoning-gym itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import reasoning_gym

from data_prep import cli
from data_prep.reasoning_gym_gen import PRESETS, generate, parse_tasks
from data_prep.schema import BOXED_INSTRUCTION


def _problem(row) -> str:
    content = list(row["prompt"])[0]["content"]
    assert content.endswith("\n" + BOXED_INSTRUCTION)
    return content[: -len("\n" + BOXED_INSTRUCTION)]


def test_cli_end_to_end(tmp_path: Path, capsys):
    argv = ["reasoning_gym", "--out", str(tmp_path), "--tasks", "basic_arithmetic,chain_sum,gsm_symbolic"]
    argv += ["--size", "90", "--val-size", "30", "--seed", "5"]
    assert cli.main(argv) == 0
    assert "wrote 90 train rows" in capsys.readouterr().out
    train = pd.read_parquet(tmp_path / "train.parquet")
    val = pd.read_parquet(tmp_path / "val.parquet")
    assert len(train) == 90 and len(val) == 30
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    counts = train["data_source"].value_counts().to_dict()
    assert counts == {f"reasoning_gym/{t}": 30 for t in ("basic_arithmetic", "chain_sum", "gsm_symbolic")}
    # disjoint and duplicate-free
    train_q = {_problem(r) for _, r in train.iterrows()}
    val_q = {_problem(r) for _, r in val.iterrows()}
    assert len(train_q) == 90 and len(val_q) == 30 and not train_q & val_q
    assert set(train["extra_info"].map(lambda e: e["split"])) == {"train"}
    assert set(val["extra_info"].map(lambda e: e["split"])) == {"val"}
    assert list(train["extra_info"].map(lambda e: e["index"])) == list(range(90))

    # gold answers agree with reasoning-gym's own scorer on a regenerated item (original_id = task/seed/idx)
    for _, row in train.head(12).iterrows():
        task, seed, idx = row["extra_info"]["original_id"].split("/")
        item = reasoning_gym.create_dataset(task, size=int(idx) + 1, seed=int(seed.removeprefix("seed")))[
            int(idx)
        ]
        assert _problem(row) == item["question"].strip()
        gold = row["reward_model"]["ground_truth"]
        assert gold == str(item["answer"]).strip()
        ds = reasoning_gym.create_dataset(task, size=int(idx) + 1, seed=int(seed.removeprefix("seed")))
        assert ds.score_answer(gold, item) == 1.0

    # rerun: identical output (seeded)
    first = (tmp_path / "train.parquet").read_bytes()
    assert cli.main(argv) == 0
    assert (tmp_path / "train.parquet").read_bytes() == first


def test_seed_changes_problems():
    specs = parse_tasks("chain_sum")
    a, _ = generate(specs, 20, seed=0)
    b, _ = generate(specs, 20, seed=1)
    qa = {_problem(r) for r in a}
    qb = {_problem(r) for r in b}
    assert len(qa & qb) < 5  # a different seed is a different stream, not a shifted copy


def test_presets_and_overrides_reach_reasoning_gym(tmp_path: Path):
    overrides = {"chain_sum": {"max_terms": 3}, "basic_arithmetic@hard": {"max_digits": 2}}
    specs = parse_tasks("chain_sum@easy,basic_arithmetic@hard", overrides)
    easy, hard = specs
    assert easy.config == {**PRESETS["easy"]["chain_sum"], "max_terms": 3}
    assert hard.config == {**PRESETS["hard"]["basic_arithmetic"], "max_digits": 2}
    train, _ = generate(specs, 40, seed=3)
    for row in train:
        q = _problem(row)
        numbers = [int(tok) for tok in re.findall(r"\d+", q)]
        if row["data_source"] == "reasoning_gym/chain_sum@easy":
            # preset: one-digit terms; override: at most 3 terms
            assert 2 <= len(numbers) <= 3 and all(n <= 9 for n in numbers)
        else:
            assert row["data_source"] == "reasoning_gym/basic_arithmetic@hard"
            # preset: at least 4 terms; override: at most 2 digits
            assert len(numbers) >= 4 and all(n <= 99 for n in numbers)
    # JSON file form of --task-config through the CLI
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"chain_sum": {"max_digits": 1, "max_terms": 2}}))
    assert (
        cli.main(
            [
                "reasoning_gym",
                "--out",
                str(tmp_path),
                "--tasks",
                "chain_sum",
                "--size",
                "10",
                "--task-config",
                str(cfg),
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    ("tasks", "overrides", "match"),
    [
        ("", None, "--tasks is empty"),
        ("no_such_task", None, "unknown reasoning-gym task"),
        ("chain_sum@medium", None, "unknown preset"),
        ("gsm_symbolic@easy", None, "not defined for task"),
        ("chain_sum,chain_sum", None, "twice"),
        ("chain_sum", {"basic_arithmetic": {}}, "--task-config has key"),
    ],
)
def test_bad_task_specs(tasks, overrides, match):
    with pytest.raises(ValueError, match=match):
        parse_tasks(tasks, overrides)


def test_too_few_distinct_problems_is_a_clear_error():
    specs = parse_tasks("chain_sum", {"chain_sum": {"min_terms": 2, "max_terms": 2, "max_digits": 1}})
    # 2 one-digit terms and '+'/'-': at most 200 distinct problems
    with pytest.raises(ValueError, match="distinct problems"):
        generate(specs, 400, seed=0)


def test_cli_reports_bad_config_key(tmp_path: Path, capsys):
    argv = ["reasoning_gym", "--out", str(tmp_path), "--tasks", "chain_sum", "--size", "5"]
    assert cli.main([*argv, "--task-config", '{"chain_sum": {"not_a_field": 1}}']) == 2
    assert "--task-config" in capsys.readouterr().err
    assert cli.main([*argv, "--task-config", "{not json"]) == 2


def test_prompt_template_option(tmp_path: Path):
    """--prompt-template dapo writes both files in DAPO's template; the problems are the same as with boxed."""
    argv = ["reasoning_gym", "--tasks", "chain_sum", "--size", "6", "--val-size", "2", "--seed", "1"]
    assert cli.main([*argv, "--out", str(tmp_path / "boxed")]) == 0
    assert cli.main([*argv, "--out", str(tmp_path / "dapo"), "--prompt-template", "dapo"]) == 0
    for split in ("train", "val"):
        boxed = pd.read_parquet(tmp_path / "boxed" / f"{split}.parquet")
        dapo = pd.read_parquet(tmp_path / "dapo" / f"{split}.parquet")
        assert set(dapo["extra_info"].map(lambda e: e["prompt_template"])) == {"dapo"}
        assert set(boxed["extra_info"].map(lambda e: e["prompt_template"])) == {"boxed"}
        for (_, b), (_, d) in zip(boxed.iterrows(), dapo.iterrows(), strict=True):
            content = list(d["prompt"])[0]["content"]
            assert content.startswith("Solve the following math problem step by step.")
            assert f"\n\n{_problem(b)}\n\n" in content and content.endswith('after "Answer:".')
