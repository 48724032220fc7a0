"""Reading sources (local json/jsonl/parquet files or folders, or the Hugging Face hub) and atomic writes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from recipe.files import atomic_file

__all__ = ["LOCAL_SUFFIXES", "log", "load_local", "load_hub", "write_parquet_atomic"]

LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")


def log(msg: str) -> None:
    """Progress output goes to stderr so stdout stays clean for the summary."""
    print(f"[data_prep] {msg}", file=sys.stderr, flush=True)


def _read_json(path: Path) -> list[dict]:
    """A JSON list of records, a JSON object holding one under data/rows/train/test/examples, or JSON lines."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return _read_jsonl(path)  # a .json file that is really JSON lines
    if isinstance(data, dict):
        lists = [
            data[k] for k in ("data", "rows", "train", "test", "examples") if isinstance(data.get(k), list)
        ]
        data = lists[0] if lists else [data]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return data


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: invalid JSON line ({exc.msg})") from exc
    return records


def _read_parquet(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _files_in(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in LOCAL_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"--source folder {folder} holds no {'/'.join(LOCAL_SUFFIXES)} files")
    return files


def load_local(source: str | os.PathLike, split: str | None = None) -> list[dict]:
    """Records of a local file, or of every json/jsonl/parquet file in a folder (sorted by path).

    For a folder, when ``split`` is given and some file names contain it (e.g. ``test-00000.parquet``),
    only those files are read.
    """
    path = Path(source).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"--source {path} does not exist (give a .json/.jsonl/.parquet file or a folder)"
        )
    files = _files_in(path) if path.is_dir() else [path]
    if path.is_dir() and split:
        matching = [f for f in files if split in f.name]
        files = matching or files
    records: list[dict] = []
    for f in files:
        if f.suffix == ".parquet":
            part = _read_parquet(f)
        elif f.suffix == ".jsonl":
            part = _read_jsonl(f)
        elif f.suffix == ".json":
            part = _read_json(f)
        else:
            raise ValueError(f"--source {f}: unsupported file type {f.suffix!r}; use one of {LOCAL_SUFFIXES}")
        log(f"read {len(part)} records from {f}")
        records.extend(part)
    return records


def load_hub(repo_id: str, config: str | None, split: str) -> list[dict]:
    """Records of a hub dataset split via ``datasets.load_dataset`` (needs network or a warm HF cache)."""
    from datasets import load_dataset

    log(f"loading {repo_id}{f' [{config}]' if config else ''} split={split} from the Hugging Face hub")
    try:
        ds = load_dataset(repo_id, config, split=split)
    except Exception as exc:
        raise RuntimeError(
            f"could not load {repo_id!r} (config={config!r}, split={split!r}) from the hub: {exc}. "
            "Offline? Download the files elsewhere and pass --source PATH (json, jsonl or parquet)."
        ) from exc
    return ds.to_list()


def write_parquet_atomic(rows: Iterable[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Write ``rows`` to ``path`` through ``recipe.files.atomic_file``: never half-written."""
    path = Path(path)
    table = pa.Table.from_pandas(pd.DataFrame(list(rows)), preserve_index=False)
    with atomic_file(path, "wb") as f:
        pq.write_table(table, f)
    return path
