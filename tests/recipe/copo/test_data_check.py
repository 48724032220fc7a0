"""Bad data fails before any worker starts, naming the file, the row and the fix (recipe/copo/data_check.py).

Each case writes a parquet of good rows with one bad row (row 3) and checks the composed ``copo_cpu``
config against it. Prompt lengths are recomputed here the way verl's agent loop tokenizes (the chat
template tokenized in one call), independently of the checker's own path. The last test runs the real
``main_copo`` on a bad file: it fails in seconds and Ray never starts.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import cli
from recipe.copo.config_check import compose
from recipe.copo.data_check import DataError, check_data
from tests.faults.records import record
from tests.paths import REPO

BAD_ROW = 3


def good_row(i: int) -> dict:
    return {
        "data_source": "tiny_arith",
        "prompt": [{"role": "user", "content": f"{i}+1="}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
        "extra_info": {"index": i, "split": "train"},
    }


def write(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def with_bad_row(path: Path, bad: dict, n: int = 8) -> Path:
    rows = [good_row(i) for i in range(n)]
    rows[BAD_ROW] = bad
    return write(path, rows)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from recipe.models.tiny import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny") / "model")


def config_for(model: Path, train: Path, val: Path, *extra: str):
    return compose(
        [
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.max_prompt_length=64",
            *extra,
        ],
        config_name="copo_cpu",
    )


def verl_prompt_length(model: Path, content: str) -> int:
    """Tokens of a one-message prompt as verl's agent loop counts them (one tokenizing chat-template call)."""
    from transformers import AutoTokenizer
    from verl.utils.tokenizer import normalize_token_ids

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=True
    )
    return len(normalize_token_ids(ids))


def bad(i: int = BAD_ROW, **fields) -> dict:
    row = good_row(i)
    row.update(fields)
    return row


# case -> (the bad row i, the message; True when parquet's typed columns force every row to share the fault)
CASES = {
    "missing ground truth": (
        lambda i: bad(i, reward_model={"style": "rule"}),
        "reward_model.ground_truth is missing",
        False,
    ),
    "ground truth is None": (
        lambda i: bad(i, reward_model={"style": "rule", "ground_truth": None}),
        "ground_truth is missing",
        False,
    ),
    "non-string ground truth": (
        lambda i: bad(i, reward_model={"style": "rule", "ground_truth": i + 1}),
        f"reward_model.ground_truth is a int ({BAD_ROW + 1}), not a string; store the answer as text (e.g. '{BAD_ROW + 1}')",
        True,
    ),
    "empty ground truth": (
        lambda i: bad(i, reward_model={"style": "rule", "ground_truth": "  "}),
        "ground_truth is an empty string",
        False,
    ),
    "empty prompt": (
        lambda i: bad(i, prompt=[{"role": "user", "content": ""}]),
        "prompt is empty (its messages hold no text)",
        False,
    ),
    "no messages": (lambda i: bad(i, prompt=[]), "prompt is empty; the row has no question", False),
    "prompt as a string": (lambda i: bad(i, prompt=f"{i}+1="), "prompt is a plain string", True),
    "code data_source": (
        lambda i: bad(i, data_source="codecontests"),
        "data_source='codecontests': not a math dataset",
        False,
    ),
    "empty data_source": (
        lambda i: bad(i, data_source=""),
        "data_source is ''; it must name the dataset",
        False,
    ),
    "missing data_source": (lambda i: bad(i, data_source=None), "data_source is None", False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_row_is_named_with_its_file_row_and_fix(tmp_path: Path, model: Path, case: str) -> None:
    make, needle, whole_file = CASES[case]
    rows = [make(i) if whole_file or i == BAD_ROW else good_row(i) for i in range(8)]
    train = write(tmp_path / "train.parquet", rows)
    val = write(tmp_path / "val.parquet", [good_row(i) for i in range(4)])
    with pytest.raises(DataError) as err:
        check_data(config_for(model, train, val))
    message = str(err.value)
    assert f"data.train_files: {train}: {8 if whole_file else 1} bad row(s)" in message, message
    assert f"train.parquet row {BAD_ROW}: " in message and needle in message, message
    assert "val.parquet" not in message  # the good file is not blamed


def test_a_prompt_over_max_prompt_length_is_measured_as_verl_measures_it(tmp_path: Path, model: Path) -> None:
    content = "What is the sum of the first ten odd numbers, counted from one?"
    length = verl_prompt_length(model, content)
    assert length > 64  # the case needs a prompt over the limit
    train = with_bad_row(tmp_path / "train.parquet", bad(prompt=[{"role": "user", "content": content}]))
    val = write(tmp_path / "val.parquet", [good_row(i) for i in range(4)])
    with pytest.raises(DataError) as err:
        check_data(config_for(model, train, val))
    message = str(err.value)
    assert f"row {BAD_ROW}: the prompt is {length} tokens, over data.max_prompt_length=64" in message, message
    assert f"raise data.max_prompt_length to at least {length}" in message
    assert "data.filter_overlong_prompts=true" in message
    # exactly at the limit passes; with filtering on, verl drops the row itself and the check lets it be
    check_data(config_for(model, train, val, f"data.max_prompt_length={length}"))
    check_data(config_for(model, train, val, "data.filter_overlong_prompts=true"))


def test_a_parquet_that_is_not_ours_names_the_missing_columns(tmp_path: Path, model: Path) -> None:
    foreign = write(tmp_path / "foreign.parquet", [{"question": "1+1=", "answer": "2"}] * 3)
    good = write(tmp_path / "val.parquet", [good_row(i) for i in range(4)])
    with pytest.raises(DataError) as err:
        check_data(config_for(model, good, foreign))
    message = str(err.value)
    assert f"data.val_files: {foreign} is not a verl RL parquet" in message, message
    assert "no column 'data_source', 'prompt', 'reward_model'" in message
    assert "python -m data_prep" in message
    text = tmp_path / "notes.parquet"
    text.write_text("not parquet at all\n")
    with pytest.raises(DataError, match="is not a readable parquet file"):
        check_data(config_for(model, good, text))
    with pytest.raises(DataError, match="does not exist"):
        check_data(config_for(model, good, tmp_path / "missing.parquet"))


def test_good_files_pass_and_many_bad_rows_are_counted(tmp_path: Path, model: Path) -> None:
    good = write(tmp_path / "train.parquet", [good_row(i) for i in range(8)])
    check_data(config_for(model, good, good))
    rows = [bad(i, reward_model={"ground_truth": i}) for i in range(15)]
    many = write(tmp_path / "many.parquet", rows)
    with pytest.raises(DataError) as err:
        check_data(config_for(model, many, good))
    assert "15 bad row(s)" in str(err.value) and "... and 5 more" in str(err.value)


def test_verls_own_reward_needs_a_data_source_it_scores(tmp_path: Path, model: Path) -> None:
    rows = [good_row(i) for i in range(4)]
    train = write(tmp_path / "train.parquet", rows)
    with pytest.raises(
        DataError, match="verl's built-in reward .* has no scorer for data_source='tiny_arith'"
    ):
        check_data(config_for(model, train, train, "reward.custom_reward_function.path=null"))
    for row in rows:
        row["data_source"] = "openai/gsm8k"
    gsm = write(tmp_path / "gsm.parquet", rows)
    check_data(config_for(model, gsm, gsm, "reward.custom_reward_function.path=null"))


def test_data_prep_refuses_to_write_rows_that_break_the_schema(tmp_path: Path) -> None:
    target = tmp_path / "out.parquet"
    with pytest.raises(cli.CliError, match="row 1: reward_model.ground_truth is a int"):
        cli._write_checked([good_row(0), bad(1, reward_model={"ground_truth": 3})], target)
    assert not target.exists()
    assert cli._write_checked([good_row(0)], target) == target and target.exists()


@pytest.mark.faults
@pytest.mark.ci
def test_main_copo_fails_on_bad_data_before_ray_starts(tmp_path: Path, model: Path) -> None:
    from tests.e2e.cpu_run import cpu_env

    train = with_bad_row(tmp_path / "train.parquet", bad(reward_model={"style": "rule"}))
    val = write(tmp_path / "val.parquet", [good_row(i) for i in range(4)])
    ray_dir = tmp_path / "ray"
    cmd = [sys.executable, "-m", "recipe.copo.main_copo", "--config-name", "copo_cpu"]
    cmd += [f"actor_rollout_ref.model.path={model}", f"data.train_files={train}", f"data.val_files={val}"]
    cmd += [
        "data.max_prompt_length=64",
        f"+ray_kwargs.ray_init._temp_dir={ray_dir}",
        "trainer.logger=[console]",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=cpu_env(), capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"train.parquet row {BAD_ROW}: reward_model.ground_truth is missing" in out, out[-3000:]
    assert not ray_dir.exists(), "Ray started before the data was checked"
    record(
        "4-bad-data",
        "bad data: a row without a ground truth",
        "a train parquet whose row 3 has no reward_model.ground_truth, given to main_copo",
        stop_s=elapsed,
        steps_lost=None,
        processes_left=0,
        resumed_same_next_step=None,
        note="refused before Ray started, naming file, row and fix (time: the whole command, imports included)",
    )
