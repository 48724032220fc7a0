"""The training and validation parquets, checked before Ray or any worker starts.

verl reads the files inside its workers and meets a bad row only when a batch holds it: a row without a
gold answer or with an empty prompt fails (or scores 0) hours into a run, and in verl 0.9.1's v1 trainer a
prompt longer than ``data.max_prompt_length`` is left-truncated with a log warning, its question cut off,
unless ``data.filter_overlong_prompts`` drops it. :func:`check_data` reads every row of ``data.train_files``
and ``data.val_files`` against the schema ``data_prep`` writes (``data_prep/schema.py``, the one
definition) and raises :class:`DataError` naming the file, the rows and the fix:

* a file that is missing, not a parquet, or not ours (a required column missing);
* a row with a missing, empty or non-string ground truth, an empty prompt, or a data_source that is not a
  non-empty string, or that the configured reward cannot score;
* a prompt over ``data.max_prompt_length`` tokens, measured as verl measures it (the model's chat template
  with the generation prompt), unless ``data.filter_overlong_prompts`` is on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from data_prep.schema import RowError, missing_columns, row_problems

# Rows listed per file in an error; the count says how many more there are.
MAX_LISTED = 10
RECIPE_REWARD = "pkg://recipe.reward"


class DataError(ValueError):
    """A data file the run cannot train on; the message names the file, the rows and the fix."""


def _files(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _read(path: str, columns_key: str) -> tuple[list[dict[str, Any]], list[str]]:
    import pyarrow.parquet as pq

    local = path.removeprefix("file://")
    if not os.path.isfile(local):
        raise DataError(
            f"{columns_key}: {path} does not exist (check the path, or DATA_DIR when the config uses it)"
        )
    try:
        table = pq.read_table(local)
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        raise DataError(
            f"{columns_key}: {path} is not a readable parquet file ({type(exc).__name__}: {exc}); "
            "write the data with `python -m data_prep`"
        ) from exc
    return table.to_pylist(), table.column_names


def _source_checker(config: Any) -> Callable[[str], str | None]:
    """``data_source -> reason it cannot be scored, or None``, for the configured reward function."""
    custom = config.get("reward", {}).get("custom_reward_function", {}) or {}
    path = custom.get("path")
    if path == RECIPE_REWARD:
        from recipe.reward.score import unscorable_source

        return unscorable_source
    if path:  # a user's reward function: it alone knows which sources it scores
        return lambda source: None
    from verl.utils.reward_score import default_compute_score

    def verl_default(source: str) -> str | None:
        try:
            default_compute_score(source, "", "0")
        except NotImplementedError:
            return (
                f"verl's built-in reward (reward.custom_reward_function.path is null) has no scorer for "
                f"data_source={source!r}; use reward.custom_reward_function.path={RECIPE_REWARD} for math"
            )
        except Exception:  # a scorer exists; it only disliked the dummy response
            return None
        return None

    return verl_default


def _prompt_lengths(config: Any, rows: Sequence[dict[str, Any]], prompt_key: str) -> list[int]:
    """Token count of each row's prompt as verl's agent loop builds it: the chat template with the generation
    prompt (``data.apply_chat_template_kwargs``), the model's tokenizer, no extra special tokens."""
    from transformers import AutoTokenizer

    model = config.actor_rollout_ref.model
    tokenizer_path = model.get("tokenizer_path") or model.path
    tokenizer = AutoTokenizer.from_pretrained(
        str(tokenizer_path), trust_remote_code=bool(model.get("trust_remote_code", False))
    )
    if model.get("custom_chat_template"):
        tokenizer.chat_template = model.custom_chat_template
    kwargs = dict(config.data.get("apply_chat_template_kwargs") or {})
    texts = [
        tokenizer.apply_chat_template(
            list(row[prompt_key]), add_generation_prompt=True, tokenize=False, **kwargs
        )
        for row in rows
    ]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _file_errors(config: Any, path: str, key: str, scorable: Callable[[str], str | None]) -> list[RowError]:
    data = config.data
    prompt_key = str(data.get("prompt_key", "prompt"))
    source_key = str(data.get("reward_fn_key", "data_source"))
    rows, columns = _read(path, key)
    missing = missing_columns(columns, prompt_key=prompt_key, source_key=source_key)
    if missing:
        raise DataError(
            f"{key}: {path} is not a verl RL parquet: it has no column {', '.join(map(repr, missing))} "
            f"(its columns: {columns}). Each row needs {source_key!r} (str), {prompt_key!r} (chat messages) and "
            "'reward_model' ({'ground_truth': str}); convert your data with `python -m data_prep <dataset> "
            "--source YOUR_FILE --out DIR`"
        )
    if not rows:
        raise DataError(f"{key}: {path} holds no rows")
    errors: list[RowError] = []
    verdicts: dict[str, str | None] = {}
    for i, row in enumerate(rows):
        errors += [
            RowError(i, reason) for reason in row_problems(row, prompt_key=prompt_key, source_key=source_key)
        ]
        source = row.get(source_key)
        if isinstance(source, str) and source.strip():
            if source not in verdicts:
                verdicts[source] = scorable(source)
            if verdicts[source]:
                errors.append(RowError(i, f"{source_key}={source!r}: {verdicts[source]}"))
    if errors or bool(data.get("filter_overlong_prompts", False)):
        return errors  # verl drops overlong prompts itself when filtering
    limit = int(data.max_prompt_length)
    for i, length in enumerate(_prompt_lengths(config, rows, prompt_key)):
        if length > limit:
            errors.append(
                RowError(
                    i,
                    f"the prompt is {length} tokens, over data.max_prompt_length={limit} (verl would cut its start "
                    f"off); raise data.max_prompt_length to at least {length}, set data.filter_overlong_prompts=true "
                    "to drop such rows, or shorten the prompt",
                )
            )
    return errors


def check_data(config: Any) -> None:
    """Check every local file of ``data.train_files`` and ``data.val_files``; raise :class:`DataError` on any
    bad row (all bad rows of a file are counted, the first ``MAX_LISTED`` listed)."""
    scorable = _source_checker(config)
    report = []
    for key in ("data.train_files", "data.val_files"):
        for path in _files(config.data.get(key.split(".", 1)[1])):
            if not _is_local(path):
                continue  # hdfs:// and the like: verl copies them to the node first
            errors = _file_errors(config, path, key, scorable)
            if errors:
                rows = sorted({e.row for e in errors})
                listed = [f"  {Path(path).name} {e}" for e in errors[:MAX_LISTED]]
                more = len(errors) - len(listed)
                report.append(
                    f"{key}: {path}: {len(rows)} bad row(s) (0-based row numbers):\n"
                    + "\n".join(listed)
                    + (f"\n  ... and {more} more" if more > 0 else "")
                )
    if report:
        raise DataError("the data cannot be trained on (nothing was started):\n" + "\n".join(report))
