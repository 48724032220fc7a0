"""The testbed's task, tokenizer, SFT and cache (recipe/study/testbed), on a tiny spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from recipe.models.tiny import ModelShape
from recipe.study.testbed import build as tb_build
from recipe.study.testbed.sft import SFTSpec, collate, prompt_ids, reply_ids
from recipe.study.testbed.task import Problem, TaskSpec, distinct_problems, make_splits, verl_rows
from recipe.study.testbed.tokenizer import build_tokenizer

TINY = tb_build.TestbedSpec(
    task=TaskSpec(
        levels=(("max", 2, 1), ("add", 2, 2)),
        sft_weights=(1.0, 1.0),
        train_per_level=8,
        val_per_level=4,
        seed=5,
    ),
    model=ModelShape(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64),
    sft=SFTSpec(steps=3, batch_size=4, warmup_steps=1),
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(tb_build.tokenizer_corpus())


def test_splits_are_disjoint_balanced_and_correct() -> None:
    spec = TaskSpec()
    splits = make_splits(spec)
    assert len(splits.val) == spec.val_per_level * len(spec.levels)
    assert len(splits.train) == spec.train_per_level * len(spec.levels)
    val_keys = {p.key for p in splits.val}
    train_keys = {p.key for p in splits.train}
    assert len(val_keys) == len(splits.val) and len(train_keys) == len(splits.train)  # no duplicates
    assert not val_keys & train_keys
    stream = splits.sft_stream()
    sft = [next(stream) for _ in range(3000)]
    assert not {p.key for p in sft} & (val_keys | train_keys)
    weights = dict(
        zip(spec.levels + spec.sft_only_levels, spec.sft_weights + spec.sft_only_weights, strict=True)
    )
    for level, weight in weights.items():
        share = sum(p.level == level for p in sft) / len(sft)
        assert share == pytest.approx(weight / sum(weights.values()), abs=0.03), level
    for level in spec.levels:
        assert sum(p.level == level for p in splits.val) == spec.val_per_level
    assert all(p.level in spec.levels for p in splits.val + splits.train)  # SFT-only levels stay in SFT
    for p in splits.val + sft[:300]:
        op, m, n = p.level
        assert p.op == op and sorted(len(str(x)) for x in (p.a, p.b)) == sorted((m, n))
        assert int(p.answer) == (max(p.a, p.b) if op == "max" else p.a + p.b)
        assert op != "max" or p.a != p.b
    # the same seed draws the same problems
    assert make_splits(spec).val == splits.val


def test_distinct_problem_counts_and_spec_checks() -> None:
    assert distinct_problems(("add", 1, 1)) == 45  # 1..9 with itself, unordered: 9 * 10 / 2
    assert distinct_problems(("max", 1, 1)) == 36  # ... without the 9 ties
    assert distinct_problems(("add", 2, 1)) == 90 * 9
    with pytest.raises(ValueError, match="too many"):
        TaskSpec(levels=(("max", 1, 1),), sft_weights=(1.0,), train_per_level=20, val_per_level=4)
    with pytest.raises(ValueError, match="one non-negative weight per level"):
        TaskSpec(levels=(("add", 2, 2),), sft_weights=(1.0, 1.0))
    with pytest.raises(ValueError, match="op in"):
        TaskSpec(levels=(("mul", 2, 2),), sft_weights=(1.0,))
    with pytest.raises(ValueError, match="both a study and an SFT-only level"):
        TaskSpec(levels=(("add", 1, 1),), sft_weights=(1.0,), train_per_level=4, val_per_level=4)


def test_rows_follow_the_schema_and_the_reward_scores_the_target(tokenizer) -> None:
    from recipe.reward import compute_score

    problems = [Problem("add", 57, 8, ("add", 2, 1)), Problem("add", 999, 999, ("add", 3, 3))]
    problems.append(Problem("max", 48, 84, ("max", 2, 2)))
    rows = verl_rows(problems, "train")
    assert rows[0]["data_source"] == "testbed/add2x1"
    assert rows[0]["prompt"][0]["content"].startswith("What is 57 + 8?\n")
    assert rows[1]["reward_model"]["ground_truth"] == "1998"
    assert rows[2]["prompt"][0]["content"].startswith("Which is larger, 48 or 84?\n")
    assert (
        rows[2]["reward_model"]["ground_truth"] == "84"
        and rows[2]["extra_info"]["original_id"] == "max:48|84"
    )
    for problem, row in zip(problems, rows, strict=True):
        right = compute_score(row["data_source"], problem.target, row["reward_model"]["ground_truth"])
        wrong = compute_score(row["data_source"], "\\boxed{7}", row["reward_model"]["ground_truth"])
        assert right["score"] == 1.0 and right["pred"] == problem.answer
        assert wrong["score"] == 0.0 and wrong["pred"] == "7"


def test_tokenizer_fits_verl(tokenizer) -> None:
    from verl.utils.tokenizer.chat_template import apply_chat_template

    problem = Problem("add", 123, 456, ("add", 3, 3))
    text = "<|im_start|>user\nWhat is 123 + 456?"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert len(tokenizer.encode("\n", add_special_tokens=False)) == 1  # verl's continuous-token check
    for number in ("123", "4567"):  # digits are never merged
        assert len(tokenizer.encode(number, add_special_tokens=False)) == len(number)
    ours = prompt_ids(tokenizer, problem)
    verls = apply_chat_template(tokenizer, problem.messages(), tokenize=True, add_generation_prompt=True)
    assert ours == list(verls)
    assert len(ours) < 40  # the merges make the instruction a few tokens
    reply = reply_ids(tokenizer, problem)
    assert reply[-1] == tokenizer.eos_token_id and tokenizer.decode(reply[:-1]) == "\\boxed{579}"


def test_tokenizer_is_the_same_in_another_process(tokenizer) -> None:
    code = (
        "import json; from recipe.study.testbed.build import tokenizer_corpus; "
        "from recipe.study.testbed.tokenizer import build_tokenizer; "
        "t = build_tokenizer(tokenizer_corpus()); print(json.dumps(t.get_vocab(), sort_keys=True))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == tokenizer.get_vocab()


def test_every_prompt_and_target_fits_the_pinned_lengths(tokenizer) -> None:
    from recipe.study.testbed.runs import workload

    pinned = workload()
    splits = make_splits(TaskSpec())
    longest_prompt = max(len(prompt_ids(tokenizer, p)) for p in splits.train + splits.val)
    longest_reply = max(len(reply_ids(tokenizer, p)) for p in splits.train + splits.val)
    assert longest_prompt <= pinned.data.max_prompt_length
    assert longest_reply <= pinned.data.max_response_length


def test_collate_masks_the_prompt(tokenizer) -> None:
    problems = [Problem("add", 12, 3, ("add", 2, 1)), Problem("max", 999, 998, ("max", 3, 3))]
    batch = collate(tokenizer, problems)
    for row, problem in enumerate(problems):
        prompt, reply = prompt_ids(tokenizer, problem), reply_ids(tokenizer, problem)
        labels = batch["labels"][row].tolist()
        assert labels[: len(prompt)] == [-100] * len(prompt)
        assert labels[len(prompt) : len(prompt) + len(reply)] == reply
        assert batch["attention_mask"][row].sum().item() == len(prompt) + len(reply)


def test_build_caches_by_key_and_is_reproducible(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    first = tb_build.ensure_testbed(TINY, root=tmp_path / "a")
    manifest = first.manifest()
    assert first.key == TINY.key() and first.root == tmp_path / "a" / TINY.key()
    assert manifest["spec"] == json.loads(json.dumps(TINY.as_dict()))
    assert len(manifest["sft_loss"]) == 1 and manifest["sft_loss"][0]["step"] == 3
    train = pd.read_parquet(first.data / "train.parquet")
    assert len(train) == 16 and set(train["data_source"]) == {"testbed/max2x1", "testbed/add2x2"}
    assert len(pd.read_parquet(first.data / "val.parquet")) == 8
    model = AutoModelForCausalLM.from_pretrained(first.model)
    tok = AutoTokenizer.from_pretrained(first.model)
    assert model.config.vocab_size == len(tok) and tok.eos_token == "<|im_end|>"
    assert not list((tmp_path / "a").glob(".*tmp*"))  # nothing half-built left behind

    stamp = os.stat(first.root / tb_build.MANIFEST).st_mtime_ns
    assert tb_build.ensure_testbed(TINY, root=tmp_path / "a").root == first.root
    assert os.stat(first.root / tb_build.MANIFEST).st_mtime_ns == stamp  # cached: not rebuilt

    second = tb_build.ensure_testbed(TINY, root=tmp_path / "b")
    assert second.manifest()["weights_sha256"] == manifest["weights_sha256"]  # same spec, same weights

    changed = tb_build.TestbedSpec(task=TINY.task, model=TINY.model, sft=SFTSpec(steps=4, batch_size=4))
    assert changed.key() != TINY.key()


def test_interrupted_build_leaves_no_testbed(tmp_path: Path, monkeypatch) -> None:
    def fail(spec, out):
        (out / "partial").write_text("x")
        raise KeyboardInterrupt

    monkeypatch.setattr(tb_build, "_build_into", fail)
    with pytest.raises(KeyboardInterrupt):
        tb_build.ensure_testbed(TINY, root=tmp_path)
    assert not (tmp_path / TINY.key()).exists()
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")]


def test_sft_learning_rate_schedule_hand_checked() -> None:
    from recipe.study.testbed.sft import learning_rate

    spec = SFTSpec(steps=150, lr=1e-3, warmup_steps=50, min_lr_ratio=0.1)
    assert learning_rate(spec, 1) == pytest.approx(1e-3 / 50)
    assert learning_rate(spec, 50) == pytest.approx(1e-3)
    assert learning_rate(spec, 100) == pytest.approx((1e-3 + 1e-4) / 2)  # half-way down the cosine
    assert learning_rate(spec, 150) == pytest.approx(1e-4)
    rates = [learning_rate(spec, s) for s in range(50, 151)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
