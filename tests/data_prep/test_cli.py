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
from data_prep.schema import INSTRUCTION
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


def _check_schema(path: Path, data_source: str, split: str) -> pd.DataFrame:
    df = pd.read_parquet(path)
    assert list(df.columns) == COLUMNS
    assert (df["data_source"] == data_source).all()
    assert (df["ability"] == "math").all()
    for i, row in df.iterrows():
        prompt = list(row["prompt"])
        assert len(prompt) == 1 and prompt[0]["role"] == "user"
        assert prompt[0]["content"].endswith("\n" + INSTRUCTION)
        assert row["reward_model"]["style"] == "rule"
        assert isinstance(row["reward_model"]["ground_truth"], str) and row["reward_model"]["ground_truth"]
        assert set(row["extra_info"]) == {"split", "index", "original_id"}
        assert row["extra_info"]["split"] == split and row["extra_info"]["index"] == i
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
    assert f"wrote {len(df)} rows to {path}" in out.out
    assert "skipped malformed" in out.out
    # malformed rows are listed with their row numbers on stderr
    if name != "aime25":
        assert "malformed row " in out.err
    # no temp files left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec.file_name]


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

    def crash(table, where, **kwargs):
        Path(where).write_bytes(b"PAR1 half a file")  # partial output, then the process "dies"
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

    from tests.tiny_model import build_tiny_tokenizer

    assert cli.main(["math500", "--out", str(tmp_path), "--source", str(FIX / "math500.jsonl")]) == 0
    config = OmegaConf.create(
        {"max_prompt_length": 1024, "filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")}
    )
    ds = RLHFDataset(str(tmp_path / "math500.parquet"), build_tiny_tokenizer(), config)
    assert len(ds) == 3
    item = ds[0]
    assert item["data_source"] == "HuggingFaceH4/MATH-500"
    assert item["reward_model"]["ground_truth"] == "2"
