"""Every dataset converter on its small local fixture (tests/fixtures/data_prep, see make_fixtures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from data_prep.converters import SPECS, convert_records
from data_prep.io import load_local
from data_prep.schema import BOXED_INSTRUCTION, coerce_answer, make_row, render_prompt

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "data_prep"
# DAPO-Math-17k's published prompt (as quoted in issue 14), written out here independently of schema.py
DAPO = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def _content(problem: str) -> list[dict]:
    return [{"role": "user", "content": problem + "\n" + BOXED_INSTRUCTION}]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# dataset -> (fixture, expected malformed {row: reason substring}, expected kept rows as (problem, answer, id))
EXPECTED = {
    "dapo_math_17k": (
        "dapo_math_17k.parquet",
        {30: "missing answer", 31: "empty problem"},
        [(f"What is {i} plus {i + 1}?", str(2 * i + 1), f"uid-{i}-0") for i in range(10)],
    ),
    "math": (
        "math_train.jsonl",
        {3: "no \\boxed{}"},
        [
            ("Simplify $\\frac{2}{4}$.", "\\frac{1}{2}", "0"),
            ("Compute $\\sqrt{16}$.", "4", "1"),  # last box wins
            ("Solve $x^2=4$.", "\\{-2, 2\\}", "2"),  # escaped braces inside the box
            ("Nested: find $\\frac{1}{\\frac{1}{2}}$.", "\\frac{2}{1}", "4"),
        ],
    ),
    "math500": (
        "math500.jsonl",
        {2: "empty problem", 3: "non-string answer"},
        [
            ("What is $1+1$?", "2", "test/prealgebra/1.json"),
            ("Evaluate $\\dfrac{3}{6}$.", "\\frac{1}{2}", "test/prealgebra/2.json"),
            ("Interval?", "(0,1]", "test/algebra/5.json"),
        ],
    ),
    "aime24": (
        "aime24.json",
        {2: "missing answer"},
        [
            ("Find the remainder when $7^{2}$ is divided by 5.", "4", "60"),
            ("How many positive divisors does 12 have?", "6", "61"),
        ],
    ),
    "aime25": (
        "aime25.parquet",
        {},
        [("Compute $2^5$.", "32", "I-1"), ("Compute $3^3$.", "27", "I-2"), ("Compute $10^2$.", "100", "I-3")],
    ),
    "amc23": (
        "amc23.jsonl",
        {2: "non-string answer", 3: "non-finite"},
        [("What is $\\frac{54}{2}$?", "27", "0"), ("What is $0.5 + 0.25$?", "0.75", "1")],
    ),
    "gsm8k": (
        "gsm8k/main/test-00000-of-00001.parquet",
        {2: "####"},
        [
            ("Tom has 3 apples and buys 4 more. How many apples?", "7", "0"),
            ("A shop sells 1,200 pens a day. How many in 2 days?", "2400", "1"),
        ],
    ),
}


def test_every_dataset_has_a_fixture_case():
    assert set(EXPECTED) == set(SPECS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_converter_on_fixture(name: str):
    fixture, bad_rows, kept = EXPECTED[name]
    spec = SPECS[name]
    records = load_local(FIX / fixture)
    rows, report = convert_records(spec, records)
    assert {e.row: e.reason for e in report.errors}.keys() == bad_rows.keys()
    for err in report.errors:
        assert bad_rows[err.row] in err.reason
    for template in ("dapo", "boxed"):
        rows, report = convert_records(spec, records, template=template)
        expected_rows = [
            make_row(spec.data_source, p, a, split=spec.split, index=i, original_id=orig, template=template)
            for i, (p, a, orig) in enumerate(kept)
        ]
        assert rows == expected_rows
        assert report.total == len(records)
    assert rows[0]["prompt"][0]["content"] == kept[0][0] + "\n" + BOXED_INSTRUCTION


def test_dapo_template_is_dapos_own():
    """Our "dapo" template renders exactly DAPO-Math-17k's published prompt (the fixture holds it as published)."""
    published = load_local(FIX / "dapo_math_17k.parquet")[0]["prompt"][0]["content"]
    assert published == DAPO.format(problem="What is 0 plus 1?")
    assert render_prompt("What is 0 plus 1?", "dapo") == published
    with pytest.raises(ValueError, match="--prompt-template must be one of"):
        render_prompt("x", "chatml")


def test_dapo_prompt_kept_verbatim_or_rewritten():
    records = load_local(FIX / "dapo_math_17k.parquet")
    rows, report = convert_records(SPECS["dapo_math_17k"], records)  # default: DAPO's template
    assert report.duplicates == 20  # 3 copies of 10 problems on the "hub"
    assert [r["prompt"][0]["content"] for r in rows] == [
        records[i]["prompt"][0]["content"] for i in range(10)
    ]
    assert {r["extra_info"]["prompt_template"] for r in rows} == {"dapo"}
    boxed, _ = convert_records(SPECS["dapo_math_17k"], records, template="boxed")
    content = boxed[0]["prompt"][0]["content"]
    assert "Answer: $Answer" not in content and "Remember to put" not in content
    assert content == "What is 0 plus 1?\n" + BOXED_INSTRUCTION
    # a published prompt with other whitespace around the problem is kept byte for byte (dapo), and its
    # problem still de-duplicates against the same problem written tightly
    loose = DAPO.replace("{problem}", "  What is 0 plus 1?\n")
    extra = {"prompt": [{"role": "user", "content": loose}], "reward_model": {"ground_truth": "1"}}
    rows, report = convert_records(SPECS["dapo_math_17k"], [extra, records[0]])
    assert rows[0]["prompt"][0]["content"] == loose and report.duplicates == 1


def test_dapo_fraction_is_seeded_subset():
    records = load_local(FIX / "dapo_math_17k.parquet")
    full, _ = convert_records(SPECS["dapo_math_17k"], records)
    a, rep = convert_records(SPECS["dapo_math_17k"], records, fraction=0.3, seed=7)
    b, _ = convert_records(SPECS["dapo_math_17k"], records, fraction=0.3, seed=7)
    c, _ = convert_records(SPECS["dapo_math_17k"], records, fraction=0.3, seed=8)
    assert a == b and len(a) == 3 and rep.sampled_out == 7
    full_problems = [r["prompt"][0]["content"] for r in full]
    sub_problems = [r["prompt"][0]["content"] for r in a]
    # a subset, in original order, re-indexed from 0
    positions = [full_problems.index(p) for p in sub_problems]
    assert positions == sorted(positions)
    assert [r["extra_info"]["index"] for r in a] == [0, 1, 2]
    assert [r["prompt"] for r in c] != [r["prompt"] for r in a]
    with pytest.raises(ValueError, match="--fraction"):
        convert_records(SPECS["dapo_math_17k"], records, fraction=0.0)
    with pytest.raises(ValueError, match="--prompt-template"):
        convert_records(SPECS["dapo_math_17k"], records, template="chatml")


def test_dapo_processed_variant_with_string_prompt():
    # open-r1/DAPO-Math-17k-Processed style: prompt is the bare problem, solution is the answer
    records = [{"prompt": "What is 2+2?", "solution": "4", "data_source": "x"}]
    rows, report = convert_records(SPECS["dapo_math_17k"], records, template="boxed")
    assert not report.errors
    assert rows[0]["prompt"] == _content("What is 2+2?")
    rows, _ = convert_records(SPECS["dapo_math_17k"], records)
    assert rows[0]["prompt"][0]["content"] == DAPO.format(problem="What is 2+2?")
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "4"}


def test_non_object_record_is_reported():
    rows, report = convert_records(SPECS["math500"], [["not", "a", "dict"], {"problem": "p", "answer": "1"}])
    assert [e.row for e in report.errors] == [0]
    assert len(rows) == 1


@pytest.mark.parametrize(
    ("value", "allow", "expected"),
    [
        (" 5 ", False, ("5", None)),
        (27.0, True, ("27", None)),
        (0.75, True, ("0.75", None)),
        (12, True, ("12", None)),
        (12, False, (None, "non-string")),
        (True, True, (None, "non-string")),
        (None, True, (None, "missing")),
        ("", True, (None, "missing")),
        (float("nan"), True, (None, "non-finite")),
        ([1], True, (None, "non-string")),
    ],
)
def test_coerce_answer(value, allow, expected):
    answer, reason = coerce_answer(value, allow_numeric=allow)
    assert answer == expected[0]
    if expected[1] is None:
        assert reason is None
    else:
        assert expected[1] in reason


def test_local_folder_split_filter_and_formats(tmp_path: Path):
    # folder + split filter picks the test shard only
    test_only = load_local(FIX / "gsm8k", split="test")
    assert len(test_only) == 3
    assert len(load_local(FIX / "gsm8k")) == 4
    # .json holding JSON lines, and {"data": [...]} wrappers are both read
    lines = tmp_path / "lines.json"
    lines.write_text('{"problem": "a", "answer": "1"}\n{"problem": "b", "answer": "2"}\n')
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"data": [{"problem": "c", "answer": "3"}]}))
    assert [r["problem"] for r in load_local(lines)] == ["a", "b"]
    assert [r["problem"] for r in load_local(wrapped)] == ["c"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "a"}\n{oops\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        load_local(bad)
    with pytest.raises(FileNotFoundError, match="--source"):
        load_local(tmp_path / "missing.parquet")


def test_fixture_reading_is_independent_of_loader():
    # the loader returns exactly what pyarrow/json read (guards the fixture-based tests above)
    assert load_local(FIX / "aime25.parquet") == pq.read_table(FIX / "aime25.parquet").to_pylist()
    assert load_local(FIX / "math500.jsonl") == _read_jsonl(FIX / "math500.jsonl")
