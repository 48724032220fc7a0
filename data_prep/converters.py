"""Per-dataset conversion from source records to verl RL rows.

Every dataset has a ``DatasetSpec``: its default hub location, the ``data_source`` tag written to the
parquet, the split label, and an ``extract(record) -> SourceRow`` function that knows the source's
columns (documented in ``columns``). Column names are matched case-insensitively, so
``Problem``/``problem`` and ``Answer``/``answer`` both work. The prompt is the problem in the chosen
template (``data_prep.schema.PROMPT_TEMPLATES``); a DAPO-Math-17k prompt written in DAPO's own template is
kept byte for byte when that template is chosen.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from data_prep.io import log
from data_prep.schema import (
    PAPER_TEMPLATE,
    PROMPT_TEMPLATES,
    RowError,
    coerce_answer,
    coerce_problem,
    make_row,
)
from recipe.reward.extract import last_boxed

__all__ = ["DatasetSpec", "SPECS", "ConversionReport", "SourceRow", "convert_records"]


class SourceRow(NamedTuple):
    """What an extractor reads from one source record (raw values, validated afterwards)."""

    problem: Any
    answer: Any
    original_id: Any = None  # None: use the row number
    dapo_prompt: str | None = None  # the published user message, when it is in DAPO's template


class Malformed(ValueError):
    """Raised by an extractor for a row that cannot be converted (message = the reason)."""


def _get(record: dict, *names: str) -> Any:
    """First present column among ``names`` (case-insensitive), else None."""
    lowered = {str(k).lower(): v for k, v in record.items()}
    for name in names:
        if name.lower() in lowered and lowered[name.lower()] is not None:
            return lowered[name.lower()]
    return None


def _generic(record: dict) -> SourceRow:
    return SourceRow(
        _get(record, "problem", "question", "prompt"),
        _get(record, "answer", "final_answer", "ground_truth"),
        _get(record, "id", "unique_id", "idx", "index"),
    )


# DAPO-Math-17k wraps each problem in its own "Answer:" template (schema.PROMPT_TEMPLATES["dapo"]).
_DAPO_PREFIX, _DAPO_SUFFIX = PROMPT_TEMPLATES["dapo"].split("{problem}")


def _strip_dapo_template(content: str) -> tuple[str, bool]:
    """(the problem, whether ``content`` was exactly DAPO's template around it)."""
    if content.startswith(_DAPO_PREFIX) and content.endswith(_DAPO_SUFFIX):
        return content[len(_DAPO_PREFIX) : len(content) - len(_DAPO_SUFFIX)].strip(), True
    # a variant of the template (other whitespace): cut at its fixed phrases
    start = content.find("where $Answer is the answer to the problem.")
    if start != -1:
        content = content[start + len("where $Answer is the answer to the problem.") :]
    end = content.rfind("Remember to put your answer on its own line after")
    if end != -1:
        content = content[:end]
    return content.strip(), False


def _dapo(record: dict) -> SourceRow:
    prompt = _get(record, "prompt")
    published = None
    if isinstance(prompt, list | tuple | np.ndarray):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not users or not isinstance(users[-1], str):
            raise Malformed("prompt has no user message with string content")
        problem, verbatim = _strip_dapo_template(users[-1])
        published = users[-1] if verbatim else None
    else:
        problem = prompt if prompt is not None else _get(record, "problem", "question")
    reward_model = _get(record, "reward_model")
    answer = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if answer is None:
        answer = _get(record, "solution", "answer", "ground_truth")
    extra = _get(record, "extra_info")
    orig = extra.get("index") if isinstance(extra, dict) else None
    return SourceRow(problem, answer, orig if orig is not None else _get(record, "id", "index"), published)


def _math(record: dict) -> SourceRow:
    answer = _get(record, "answer")
    if answer is None:
        solution = _get(record, "solution")
        if not isinstance(solution, str):
            raise Malformed("missing answer (no 'answer' column and no string 'solution')")
        answer = last_boxed(solution)
        if answer is None:
            raise Malformed("missing answer (no \\boxed{} in 'solution')")
    return SourceRow(_get(record, "problem", "question"), answer, _get(record, "unique_id", "id"))


_GSM8K_ANSWER_RE = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def _gsm8k(record: dict) -> SourceRow:
    raw = _get(record, "answer")
    if isinstance(raw, str):
        m = _GSM8K_ANSWER_RE.search(raw)
        if m is None:
            raise Malformed("missing answer (no '#### <answer>' line in 'answer')")
        raw = m.group(1).replace(",", "").strip()
    return SourceRow(_get(record, "question", "problem"), raw, _get(record, "id"))


@dataclass(frozen=True)
class DatasetSpec:
    """How to fetch and convert one dataset."""

    name: str  # CLI name
    data_source: str  # written to the parquet's data_source column
    split: str  # written to extra_info.split
    hub_id: str
    hub_split: str
    columns: str  # expected source columns, for --help and README
    extract: Callable[[dict], SourceRow]
    hub_configs: Sequence[str | None] = (None,)  # several configs are concatenated (e.g. MATH subjects)
    allow_numeric_answer: bool = False
    dedupe: bool = False  # drop rows whose problem text repeats an earlier one
    output_name: str = field(default="")

    @property
    def file_name(self) -> str:
        return self.output_file()

    def output_file(self, template: str = PAPER_TEMPLATE, fraction: float = 1.0, seed: int = 0) -> str:
        """``<name>[_frac<F>_seed<S>][_<template>].parquet``: the template is named unless it is the default."""
        name = self.output_name or self.name
        if fraction < 1.0:
            name += f"_frac{fraction:g}_seed{seed}"
        if template != PAPER_TEMPLATE:
            name += f"_{template}"
        return name + ".parquet"


SPECS: dict[str, DatasetSpec] = {
    s.name: s
    for s in [
        DatasetSpec(
            name="dapo_math_17k",
            data_source="math_dapo",
            split="train",
            hub_id="BytedTsinghua-SIA/DAPO-Math-17k",
            hub_split="train",
            columns="prompt (chat messages in DAPO's 'Answer:' template, kept verbatim with --prompt-template dapo) "
            "or prompt/problem (str); reward_model.ground_truth or solution/answer; extra_info.index (id). "
            "The hub file repeats each problem about 100 times: duplicates are dropped.",
            extract=_dapo,
            dedupe=True,
        ),
        DatasetSpec(
            name="math",
            data_source="MATH",
            split="train",
            hub_id="DigitalLearningGmbH/MATH-lighteval",
            hub_split="train",
            columns="problem (or question); answer, or else solution (the last \\boxed{} is the answer); optional unique_id",
            extract=_math,
        ),
        DatasetSpec(
            name="math500",
            data_source="HuggingFaceH4/MATH-500",
            split="test",
            hub_id="HuggingFaceH4/MATH-500",
            hub_split="test",
            columns="problem (or question); answer (or solution with \\boxed{}); unique_id",
            extract=_math,
        ),
        DatasetSpec(
            name="aime24",
            data_source="aime24",
            split="test",
            hub_id="HuggingFaceH4/aime_2024",
            hub_split="train",
            columns="problem (or question); answer (string or integer); id",
            extract=_generic,
            allow_numeric_answer=True,
        ),
        DatasetSpec(
            name="aime25",
            data_source="aime25",
            split="test",
            hub_id="math-ai/aime25",
            hub_split="test",
            columns="problem (or question); answer (string or integer); id",
            extract=_generic,
            allow_numeric_answer=True,
        ),
        DatasetSpec(
            name="amc23",
            data_source="amc23",
            split="test",
            hub_id="math-ai/amc23",
            hub_split="test",
            columns="question (or problem); answer (string or number, 27.0 -> '27'); id",
            extract=_generic,
            allow_numeric_answer=True,
        ),
        DatasetSpec(
            name="gsm8k",
            data_source="gsm8k",
            split="test",
            hub_id="openai/gsm8k",
            hub_configs=("main",),
            hub_split="test",
            columns="question; answer (a worked solution ending in '#### <number>'; commas removed)",
            extract=_gsm8k,
            allow_numeric_answer=True,
        ),
    ]
}


@dataclass
class ConversionReport:
    """What happened to the source rows: kept rows, malformed ones (with reasons), duplicates, sampling."""

    total: int = 0
    errors: list[RowError] = field(default_factory=list)
    duplicates: int = 0
    sampled_out: int = 0

    def reasons(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in self.errors:
            key = e.reason.split(" (")[0]
            counts[key] = counts.get(key, 0) + 1
        return counts


def _subsample(n: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted positions of a seeded ``round(fraction * n)`` subset (at least 1 when n > 0)."""
    k = max(1, round(fraction * n)) if n else 0
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def convert_records(
    spec: DatasetSpec,
    records: Sequence[dict],
    *,
    template: str = PAPER_TEMPLATE,
    fraction: float = 1.0,
    seed: int = 0,
) -> tuple[list[dict], ConversionReport]:
    """Convert source records to verl rows. Malformed rows are reported (0-based source row numbers), not raised.

    Prompts are written in ``template`` (``data_prep.schema.PROMPT_TEMPLATES``); a source prompt already in
    DAPO's template is kept verbatim when ``template == "dapo"``. ``fraction < 1`` keeps a seeded random
    subset of the valid, de-duplicated rows (original order kept).
    """
    if template not in PROMPT_TEMPLATES:
        raise ValueError(f"--prompt-template must be one of {sorted(PROMPT_TEMPLATES)}, got {template!r}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"--fraction must be in (0, 1], got {fraction}")
    report = ConversionReport(total=len(records))
    kept: list[tuple[str, str, str, str | None]] = []
    seen: set[str] = set()
    step = max(1, len(records) // 10)
    for row, record in enumerate(records):
        if row and row % step == 0 and len(records) >= 10_000:
            log(f"{spec.name}: {row}/{len(records)} rows checked")
        try:
            if not isinstance(record, dict):
                raise Malformed(f"record is a {type(record).__name__}, not an object")
            source = spec.extract(record)
        except Malformed as exc:
            report.errors.append(RowError(row, str(exc)))
            continue
        problem = coerce_problem(source.problem)
        if problem is None:
            report.errors.append(
                RowError(row, "empty problem" if source.problem is not None else "missing problem")
            )
            continue
        answer, reason = coerce_answer(source.answer, allow_numeric=spec.allow_numeric_answer)
        if answer is None:
            report.errors.append(RowError(row, reason or "missing answer"))
            continue
        if spec.dedupe:
            if problem in seen:
                report.duplicates += 1
                continue
            seen.add(problem)
        orig = str(source.original_id) if source.original_id is not None else str(row)
        kept.append((problem, answer, orig, source.dapo_prompt if template == "dapo" else None))
    if fraction < 1.0:
        positions = _subsample(len(kept), fraction, seed)
        report.sampled_out = len(kept) - len(positions)
        kept = [kept[i] for i in positions]
    rows = [
        make_row(
            spec.data_source,
            problem,
            answer,
            split=spec.split,
            index=i,
            original_id=orig,
            template=template,
            content=published,
        )
        for i, (problem, answer, orig, published) in enumerate(kept)
    ]
    return rows, report
