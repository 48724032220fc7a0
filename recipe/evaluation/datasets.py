"""Eval parquets (data_prep schema) and the number of samples k per data_source.

Schema, one row per problem: ``prompt`` (chat messages), ``data_source``,
``reward_model`` {style, ground_truth}, ``extra_info`` {split, index, original_id, prompt_template} (``data_prep.schema``).
A dataset is one ``data_source``: a parquet may hold several and several parquets may feed one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# SPEC section 7: MATH-500 and GSM8K are reported as mean@8 / maj@8, AIME 2024/2025 as mean@64.
# Keys are lower-case; a data_source matches by its full name or its last path component.
SPEC_DEFAULT_K: dict[str, int] = {
    "huggingfaceh4/math-500": 8,
    "math-500": 8,
    "gsm8k": 8,
    "openai/gsm8k": 8,
    "aime24": 64,
    "aime25": 64,
}
FALLBACK_K = 8
REQUIRED_COLUMNS = ("prompt", "data_source", "reward_model")


@dataclass(frozen=True)
class Problem:
    """One eval problem; ``problem_id`` is unique within its ``data_source``."""

    data_source: str
    problem_id: str
    messages: list[dict[str, str]]
    ground_truth: Any
    extra_info: dict[str, Any] = field(default_factory=dict)


def _aliases(data_source: str) -> tuple[str, str]:
    lower = data_source.lower()
    return lower, lower.rsplit("/", 1)[-1]


def _plain(value: Any) -> Any:
    """numpy arrays / scalars from pyarrow -> plain Python containers (JSON-serialisable)."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _messages(prompt: Any, where: str) -> list[dict[str, str]]:
    prompt = _plain(prompt)
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not all(isinstance(m, dict) and "content" in m for m in prompt):
        raise ValueError(f"{where}: column 'prompt' must be a list of chat messages {{role, content}}")
    return [{"role": str(m.get("role", "user")), "content": str(m["content"])} for m in prompt]


def load_problems(paths: Sequence[str | Path]) -> dict[str, list[Problem]]:
    """Read eval parquets and group their rows by ``data_source`` (first-seen order).

    Problem ids come from ``extra_info.index``; when a data_source lacks them or repeats one,
    its rows are numbered in reading order instead.

    Raises:
        FileNotFoundError: a parquet does not exist.
        ValueError: a required column is missing or a prompt is malformed.
    """
    import pandas as pd

    grouped: dict[str, list[tuple[Any, Problem]]] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"--data {path}: no such parquet file")
        frame = pd.read_parquet(path)
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(
                f"--data {path}: missing column(s) {missing}; expected the data_prep schema "
                f"{list(REQUIRED_COLUMNS) + ['extra_info']} (python -m data_prep ...)"
            )
        for row_number, row in enumerate(frame.to_dict("records")):
            where = f"{path} row {row_number}"
            reward_model = _plain(row["reward_model"])
            if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
                raise ValueError(f"{where}: reward_model must be a dict with a 'ground_truth' key")
            extra_info = _plain(row.get("extra_info")) or {}
            if not isinstance(extra_info, dict):
                extra_info = {}
            data_source = str(row["data_source"])
            problem = Problem(
                data_source=data_source,
                problem_id="",
                messages=_messages(row["prompt"], where),
                ground_truth=reward_model["ground_truth"],
                extra_info=extra_info,
            )
            grouped.setdefault(data_source, []).append((extra_info.get("index"), problem))

    result: dict[str, list[Problem]] = {}
    for data_source, rows in grouped.items():
        ids = [str(index) for index, _ in rows]
        usable = all(index is not None for index, _ in rows) and len(set(ids)) == len(ids)
        if not usable:
            ids = [str(i) for i in range(len(rows))]
        result[data_source] = [
            Problem(p.data_source, pid, p.messages, p.ground_truth, p.extra_info)
            for pid, (_, p) in zip(ids, rows, strict=True)
        ]
    return result


def parse_k_overrides(items: Sequence[str]) -> dict[str, int]:
    """``["aime24=64", "MATH-500=16"]`` -> ``{"aime24": 64, "math-500": 16}`` (names lower-cased)."""
    overrides: dict[str, int] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name or not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"--k-per-dataset {item!r}: expected NAME=K with K a positive integer, e.g. aime24=64"
            )
        overrides[name.lower()] = int(value)
    return overrides


def resolve_k(data_source: str, k: int | None, overrides: Mapping[str, int]) -> int:
    """Samples per problem for a data_source.

    Priority: ``--k-per-dataset`` (full name or last path component, case-insensitive), then
    ``--k`` when given, then SPEC section 7 defaults, then 8.
    """
    for alias in _aliases(data_source):
        if alias in overrides:
            return overrides[alias]
    if k is not None:
        if k < 1:
            raise ValueError(f"--k must be >= 1, got {k}")
        return k
    for alias in _aliases(data_source):
        if alias in SPEC_DEFAULT_K:
            return SPEC_DEFAULT_K[alias]
    return FALLBACK_K


def unused_overrides(data_sources: Sequence[str], overrides: Mapping[str, int]) -> list[str]:
    """Override names that match no data_source (likely typos worth an error)."""
    known = {alias for ds in data_sources for alias in _aliases(ds)}
    return sorted(name for name in overrides if name not in known)


def problems_fingerprint(problems: Sequence[Problem]) -> str:
    """Short hash of ids, prompts and answers: a resumed pair must see the same problems."""
    digest = hashlib.sha256()
    for p in problems:
        digest.update(
            json.dumps([p.problem_id, p.messages, p.ground_truth], sort_keys=True, default=str).encode()
        )
    return digest.hexdigest()[:16]
