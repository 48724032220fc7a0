"""verl's RL parquet schema and the prompt templates, shared by every converter.

One row::

    {
      "data_source": str,                         # e.g. "math_dapo", "HuggingFaceH4/MATH-500", "reasoning_gym/chain_sum"
      "prompt": [{"role": "user", "content": PROMPT_TEMPLATES[template].format(problem=problem)}],
      "ability": "math",
      "reward_model": {"style": "rule", "ground_truth": str},
      "extra_info": {"split": str, "index": int, "original_id": str, "prompt_template": str},
    }

``index`` is the row's position in the written file; ``original_id`` identifies the source record
(its id column when the source has one, else ``"<source row number>"``); ``prompt_template`` names the
template the prompt was written with.

Templates (``--prompt-template``):

* ``dapo``: DAPO-Math-17k's own prompt, verbatim as published: the problem between an instruction to end
  with an ``Answer: $Answer`` line and a reminder to do so. The paper's runs trained on it (the authors'
  scripts read the published parquet; their reward reads ``Answer:`` first), so it is ``PAPER_TEMPLATE``,
  the default of every hub dataset: evaluation sets are then prompted like the training data.
* ``boxed``: the problem, then "Let's think step by step and output the final answer within \\boxed{}."
  (verl's GSM8K/MATH examples), the default of the offline reasoning-gym generator.

The reward (``recipe.reward``) reads either format: the response's last ``\\boxed{}`` or ``Answer:`` line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ABILITY",
    "REQUIRED_COLUMNS",
    "BOXED_INSTRUCTION",
    "PAPER_TEMPLATE",
    "PROMPT_TEMPLATES",
    "REASONING_GYM_TEMPLATE",
    "RowError",
    "check_rows",
    "coerce_answer",
    "coerce_problem",
    "make_row",
    "missing_columns",
    "render_prompt",
    "row_problems",
]

ABILITY = "math"
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
# DAPO-Math-17k's prompt, character for character (BytedTsinghua-SIA/DAPO-Math-17k, the "prompt" column).
_DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)
PROMPT_TEMPLATES: dict[str, str] = {
    "dapo": _DAPO_TEMPLATE,
    "boxed": "{problem}\n" + BOXED_INSTRUCTION.replace("{", "{{").replace("}", "}}"),
}
# The template of the paper runs' training data; every hub dataset defaults to it.
PAPER_TEMPLATE = "dapo"
# The offline generator's default: its train and val files come from one run (so they always match), and
# the CPU quickstart and study were measured with it.
REASONING_GYM_TEMPLATE = "boxed"


@dataclass(frozen=True)
class RowError:
    """A malformed source row: ``row`` is its 0-based position in the source, ``reason`` says what is wrong."""

    row: int
    reason: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.reason}"


def render_prompt(problem: str, template: str) -> str:
    """The user message for ``problem`` in ``template`` (a key of ``PROMPT_TEMPLATES``)."""
    if template not in PROMPT_TEMPLATES:
        raise ValueError(f"--prompt-template must be one of {sorted(PROMPT_TEMPLATES)}, got {template!r}")
    return PROMPT_TEMPLATES[template].format(problem=problem)


def coerce_problem(value: Any) -> str | None:
    """The problem text stripped, or None when missing/empty/not a string."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


def coerce_answer(value: Any, *, allow_numeric: bool) -> tuple[str | None, str | None]:
    """``(answer, None)`` or ``(None, reason)``.

    Strings are stripped. Finite ints/floats are accepted only where a dataset stores numeric answers
    (``allow_numeric``: AIME, AMC); integral floats become integer strings (``27.0`` -> ``"27"``).
    """
    if value is None:
        return None, "missing answer"
    if isinstance(value, str):
        value = value.strip()
        return (value, None) if value else (None, "missing answer (empty string)")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, f"non-string answer of type {type(value).__name__}"
    if not allow_numeric:
        return None, f"non-string answer of type {type(value).__name__} ({value!r})"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, f"non-finite numeric answer {value!r}"
        if value.is_integer():
            return str(int(value)), None
    return str(value), None


def make_row(
    data_source: str,
    problem: str,
    answer: str,
    *,
    split: str,
    index: int,
    original_id: str,
    template: str,
    content: str | None = None,
) -> dict:
    """One verl RL row (see module docstring). ``content``: the user message as the source published it
    (kept verbatim), else ``render_prompt(problem, template)``."""
    return {
        "data_source": data_source,
        "prompt": [
            {"role": "user", "content": render_prompt(problem, template) if content is None else content}
        ],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {
            "split": split,
            "index": int(index),
            "original_id": str(original_id),
            "prompt_template": template,
        },
    }


# --- the schema as a check: what the trainer's data check (recipe/copo/data_check.py) and the writer
# (data_prep's CLI, before each write) both apply. ``ability`` and ``extra_info`` are optional: nothing
# downstream needs them.
REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")


def missing_columns(
    columns: Iterable[str], *, prompt_key: str = "prompt", source_key: str = "data_source"
) -> list[str]:
    """The required columns (``prompt_key`` and ``source_key`` standing for prompt/data_source) not in ``columns``."""
    renamed = {"data_source": source_key, "prompt": prompt_key}
    have = set(columns)
    return [renamed.get(c, c) for c in REQUIRED_COLUMNS if renamed.get(c, c) not in have]


def _prompt_problem(prompt: Any, prompt_key: str) -> str | None:
    if prompt is None:
        return f"{prompt_key} is missing; it must be a list of chat messages, e.g. [{{'role': 'user', 'content': ...}}]"
    if isinstance(prompt, str):
        return (
            f"{prompt_key} is a plain string; it must be a list of chat messages "
            "[{'role': 'user', 'content': ...}] (verl applies the model's chat template to it)"
        )
    if not isinstance(prompt, list | tuple) or not prompt:
        return f"{prompt_key} is empty; the row has no question to ask the model (drop the row or fill it)"
    text = ""
    for i, message in enumerate(prompt):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            return f"{prompt_key}[{i}] is not a chat message with a string 'role' and 'content'"
        content = message.get("content")
        if not isinstance(content, str):
            return f"{prompt_key}[{i}].content is {type(content).__name__}, not a string"
        text += content
    if not text.strip():
        return f"{prompt_key} is empty (its messages hold no text); the row has no question (drop the row or fill it)"
    return None


def row_problems(
    row: Mapping[str, Any], *, prompt_key: str = "prompt", source_key: str = "data_source"
) -> list[str]:
    """What is wrong with one RL row (empty when nothing), each reason saying what to fix."""
    problems = []
    source = row.get(source_key)
    if not isinstance(source, str) or not source.strip():
        problems.append(
            f"{source_key} is {source!r}; it must name the dataset as a non-empty string (e.g. 'math_dapo'): "
            "the reward and the validation metrics are keyed by it"
        )
    problem = _prompt_problem(row.get(prompt_key), prompt_key)
    if problem:
        problems.append(problem)
    reward = row.get("reward_model")
    truth = reward.get("ground_truth") if isinstance(reward, Mapping) else None
    if not isinstance(reward, Mapping) or "ground_truth" not in reward or truth is None:
        problems.append(
            "reward_model.ground_truth is missing; every row needs its gold answer, "
            "{'style': 'rule', 'ground_truth': '<answer>'}"
        )
    elif not isinstance(truth, str):
        problems.append(
            f"reward_model.ground_truth is a {type(truth).__name__} ({truth!r}), not a string; "
            f"store the answer as text (e.g. {str(truth)!r}): the reward compares strings"
        )
    elif not truth.strip():
        problems.append("reward_model.ground_truth is an empty string; every row needs its gold answer")
    return problems


def check_rows(
    rows: Iterable[Mapping[str, Any]], *, prompt_key: str = "prompt", source_key: str = "data_source"
) -> list[RowError]:
    """Every problem of every row, as :class:`RowError` with the row's 0-based position."""
    errors = []
    for i, row in enumerate(rows):
        errors += [
            RowError(i, reason) for reason in row_problems(row, prompt_key=prompt_key, source_key=source_key)
        ]
    return errors
