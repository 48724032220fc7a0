"""The ``python -m data_prep`` CLI: output files, schema, strict mode, atomic writes, idempotence, hub wiring."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from data_prep import cli, io
from data_prep.converters import SPECS
from data_prep.schema import BOXED_INSTRUCTION, PAPER_TEMPLATE, PROMPT_TEMPLATES
from tests.paths import REPO

ROOT = REPO
FIX = ROOT / "tests" / "fixtures" / "data_prep"

SOURCES = {
    "dapo_math_17k": "dapo_math_17k.parquet",
    "math": "math_train.jsonl",
    "math500": "math500.jsonl",
    "aime24": "aime24.json",
    "aime25": "aime25.parquet",
    "amc23": "amc23.jsonl",
    "gsm8k": "gsm8k",
}
COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
# DAPO-Math-17k's published prompt around a problem (the brief of issue 14 quotes it; independent of schema.py)
DAPO_HEAD = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_TAIL = '\n\nRemember to put your answer on its own line after "Answer:".'


def _check_schema(path: Path, data_source: str, split: str, template: str = "dapo") -> pd.DataFrame:
    df = pd.read_parquet(path)
    assert list(df.columns) == COLUMNS
    assert (df["data_source"] == data_source).all()
    assert (df["ability"] == "math").all()
    for i, row in df.iterrows():
        prompt = list(row["prompt"])
        assert len(prompt) == 1 and prompt[0]["role"] == "user"
        content = prompt[0]["content"]
        if template == "dapo":
            assert content.startswith(DAPO_HEAD) and content.endswith(DAPO_TAIL)
            assert content[len(DAPO_HEAD) : -len(DAPO_TAIL)].strip()
        else:
            assert content.endswith("\n" + BOXED_INSTRUCTION) and "Answer: $Answer" not in content
        assert row["reward_model"]["style"] == "rule"
        assert isinstance(row["reward_model"]["ground_truth"], str) and row["reward_model"]["ground_truth"]
        assert set(row["extra_info"]) == {"split", "index", "original_id", "prompt_template"}
        assert row["extra_info"]["split"] == split and row["extra_info"]["index"] == i
        assert row["extra_info"]["prompt_template"] == template
    return df


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_cli_writes_schema(name: str, tmp_path: Path, capsys):
    spec = SPECS[name]
    argv = [name, "--out", str(tmp_path), "--source", str(FIX / SOURCES[name])]
    if name == "gsm8k":
        argv += ["--split", "test"]
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    path = tmp_path / spec.file_name
    df = _check_schema(path, spec.data_source, spec.split)
    assert f"wrote {len(df)} rows (dapo prompts) to {path}" in out.out
    assert "skipped malformed" in out.out
    # malformed rows are listed with their row numbers on stderr
    if name != "aime25":
        assert "malformed row " in out.err
    # no temp files left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec.file_name]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_boxed_template_is_named_in_the_file(name: str, tmp_path: Path):
    argv = [name, "--out", str(tmp_path), "--source", str(FIX / SOURCES[name]), "--prompt-template", "boxed"]
    if name == "gsm8k":
        argv += ["--split", "test"]
    assert cli.main(argv) == 0
    spec = SPECS[name]
    boxed = tmp_path / f"{spec.file_name.removesuffix('.parquet')}_boxed.parquet"
    assert sorted(p.name for p in tmp_path.iterdir()) == [boxed.name]
    _check_schema(boxed, spec.data_source, spec.split, template="boxed")


def test_every_dataset_defaults_to_the_paper_template():
    """Evaluation sets are prompted like the training data (issue 14): one default, DAPO's template."""
    parser = cli.build_parser()
    for name in SPECS:
        args = parser.parse_args([name, "--out", "x"])
        assert args.prompt_template == PAPER_TEMPLATE == "dapo", name
    assert parser.parse_args(["reasoning_gym", "--out", "x", "--size", "1"]).prompt_template == "boxed"
    with pytest.raises(SystemExit):
        parser.parse_args(["math500", "--out", "x", "--prompt-template", "chatml"])
    assert set(PROMPT_TEMPLATES) == {"dapo", "boxed"}


def test_paper_configs_read_files_written_in_one_template():
    """paper_base.yaml's train and val files are data_prep's default-template files (so their prompts match)."""
    import yaml

    data = yaml.safe_load((REPO / "recipe/copo/config/paper_base.yaml").read_text())["data"]
    files = [data["train_files"], *data["val_files"]]
    names = [f.rsplit("/", 1)[-1] for f in files]
    default_names = {spec.file_name: spec for spec in SPECS.values()}
    assert all(n in default_names for n in names), names
    assert default_names[names[0]].name == "dapo_math_17k" and default_names[names[0]].split == "train"
    assert {default_names[n].split for n in names[1:]} == {"test"}


def test_fraction_file_name(tmp_path: Path):
    argv = ["dapo_math_17k", "--out", str(tmp_path), "--source", str(FIX / SOURCES["dapo_math_17k"])]
    assert cli.main([*argv, "--fraction", "0.1", "--seed", "3"]) == 0
    df = pd.read_parquet(tmp_path / "dapo_math_17k_frac0.1_seed3.parquet")
    assert len(df) == 1  # round(0.1 * 10 unique valid problems)


def test_strict_fails_and_writes_nothing(tmp_path: Path, capsys):
    rc = cli.main(["math500", "--out", str(tmp_path), "--source", str(FIX / "math500.jsonl"), "--strict"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "row 2: empty problem" in err and "row 3: non-string answer" in err
    assert not (tmp_path / "math500.parquet").exists()


def test_strict_passes_on_clean_source(tmp_path: Path):
    assert (
        cli.main(["aime25", "--out", str(tmp_path), "--source", str(FIX / "aime25.parquet"), "--strict"]) == 0
    )


def test_rerun_is_idempotent(tmp_path: Path):
    argv = ["math500", "--out", str(tmp_path), "--source", str(FIX / "math500.jsonl")]
    assert cli.main(argv) == 0
    first = (tmp_path / "math500.parquet").read_bytes()
    assert cli.main(argv) == 0
    assert (tmp_path / "math500.parquet").read_bytes() == first


def test_crash_during_write_keeps_old_file(tmp_path: Path, monkeypatch):
    argv = ["aime24", "--out", str(tmp_path), "--source", str(FIX / "aime24.json")]
    assert cli.main(argv) == 0
    target = tmp_path / "aime24.parquet"
    before = target.read_bytes()

    def crash(table, where, **kwargs):  # ``where``: a path or an open binary file
        half = b"PAR1 half a file"  # partial output, then the process "dies"
        where.write(half) if hasattr(where, "write") else Path(where).write_bytes(half)
        raise KeyboardInterrupt

    monkeypatch.setattr(io.pq, "write_table", crash)
    with pytest.raises(KeyboardInterrupt):
        cli.main(argv)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aime24.parquet"]


def test_hub_path_uses_spec_defaults(tmp_path: Path, monkeypatch):
    calls = []

    def fake_hub(repo_id, config, split):
        calls.append((repo_id, config, split))
        return [{"question": "Q?", "answer": "work\n#### 1,234"}]

    monkeypatch.setattr(cli, "load_hub", fake_hub)
    assert cli.main(["gsm8k", "--out", str(tmp_path)]) == 0
    assert calls == [("openai/gsm8k", "main", "test")]
    df = pd.read_parquet(tmp_path / "gsm8k.parquet")
    assert df["reward_model"][0]["ground_truth"] == "1234"
    # --source that is not a path is a hub repo id; --hub-config and --split override
    calls.clear()
    assert (
        cli.main(
            ["math500", "--out", str(tmp_path), "--source", "me/mirror", "--hub-config", "c", "--split", "s"]
        )
        == 0
    )
    assert calls == [("me/mirror", "c", "s")]


def test_missing_local_source_is_a_clear_error(tmp_path: Path, capsys):
    assert cli.main(["aime24", "--out", str(tmp_path), "--source", str(tmp_path / "nope.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_no_valid_rows_is_an_error(tmp_path: Path, capsys):
    src = tmp_path / "empty.jsonl"
    src.write_text('{"problem": "", "answer": "1"}\n')
    assert cli.main(["math500", "--out", str(tmp_path / "o"), "--source", str(src)]) == 2
    assert "no valid rows" in capsys.readouterr().err


def test_module_entry_point(tmp_path: Path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_prep",
            "aime25",
            "--out",
            str(tmp_path),
            "--source",
            str(FIX / "aime25.parquet"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "aime25: wrote 3 rows" in proc.stdout
    assert pq.read_table(tmp_path / "aime25.parquet").num_rows == 3


def test_parquet_loads_in_verl_rl_dataset(tmp_path: Path):
    """verl's own RLHFDataset reads and tokenizes our files (chat template applied to ``prompt``)."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from recipe.models.tiny import build_tiny_tokenizer

    assert cli.main(["math500", "--out", str(tmp_path), "--source", str(FIX / "math500.jsonl")]) == 0
    config = OmegaConf.create(
        {"max_prompt_length": 1024, "filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")}
    )
    ds = RLHFDataset(str(tmp_path / "math500.parquet"), build_tiny_tokenizer(), config)
    assert len(ds) == 3
    item = ds[0]
    assert item["data_source"] == "HuggingFaceH4/MATH-500"
    assert item["reward_model"]["ground_truth"] == "2"
