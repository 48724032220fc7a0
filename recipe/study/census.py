"""Step-0 group census: how often the initial policy's groups are all-correct, all-wrong or mixed.

A study step sees only a handful of prompts, so the share of zero-variance groups it logs is a
coarse estimate. The census samples G responses for many training prompts from the initial model,
with the trainer's rollout settings, and counts the groups per task: the mechanism COPO targets
(all-correct and all-wrong groups give GRPO no gradient) measured before any training.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

ALL = "all"
CENSUS_COLUMNS = (
    "dataset",
    "groups",
    "k",
    "accuracy",
    "frac_all_correct",
    "frac_all_wrong",
    "frac_mixed",
)


def write_census_subset(train_parquet: Path, per_dataset: int, out_parquet: Path) -> pd.DataFrame:
    """The first ``per_dataset`` rows of each ``data_source`` in ``train_parquet``, as a parquet.

    Raises:
        ValueError: when a data_source has fewer rows than asked for (the census would be
            unbalanced across tasks without saying so).
    """
    if per_dataset < 1:
        raise ValueError(f"per_dataset must be >= 1, got {per_dataset}")
    frame = pd.read_parquet(train_parquet)
    counts = frame["data_source"].value_counts()
    short = {str(k): int(v) for k, v in counts.items() if v < per_dataset}
    if short:
        raise ValueError(
            f"{train_parquet}: data_source(s) {short} have fewer than {per_dataset} rows; "
            "lower --per-task or generate more training data"
        )
    subset = frame.groupby("data_source", sort=False).head(per_dataset).reset_index(drop=True)
    out_parquet.parent.mkdir(parents=True, exist_ok=True)
    subset.to_parquet(out_parquet)
    return subset


def _row(dataset: str, groups: list[list[bool]]) -> dict[str, Any]:
    ks = {len(g) for g in groups}
    n = len(groups)
    return {
        "dataset": dataset,
        "groups": n,
        "k": ks.pop() if len(ks) == 1 else "mixed",
        "accuracy": sum(sum(g) for g in groups) / sum(len(g) for g in groups),
        "frac_all_correct": sum(all(g) for g in groups) / n,
        "frac_all_wrong": sum(not any(g) for g in groups) / n,
        "frac_mixed": sum(any(g) and not all(g) for g in groups) / n,
    }


def census_rows(samples: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-dataset group outcome shares from eval samples (``scripts/evaluate.py``'s samples.jsonl).

    Args:
        samples: dicts with ``dataset``, ``problem_id`` and ``correct``; the samples of one
            (dataset, problem_id) form one group.

    Returns:
        one row per dataset (sorted by name) and a last row ``all`` over every group, each with
        ``CENSUS_COLUMNS``.
    """
    groups: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        groups[str(sample["dataset"])][str(sample["problem_id"])].append(bool(sample["correct"]))
    if not groups:
        raise ValueError("no samples: the census needs at least one scored sample")
    rows = [_row(name, list(groups[name].values())) for name in sorted(groups)]
    rows.append(_row(ALL, [g for name in sorted(groups) for g in groups[name].values()]))
    return rows


def read_census(path: Path) -> list[dict[str, Any]]:
    """The rows of a committed ``census.csv`` (as :func:`census_rows` returned them, up to rounding)."""
    import csv

    with open(path, newline="") as f:
        return [
            {
                k: v if k == "dataset" else (int(v) if k in ("groups", "k") and v.isdigit() else float(v))
                for k, v in r.items()
            }
            for r in csv.DictReader(f)
        ]


def census_markdown(rows: list[dict[str, Any]]) -> str:
    """A markdown table of ``census_rows`` (shares in percent)."""
    lines = [
        "| task | groups | G | accuracy (%) | all correct (%) | all wrong (%) | mixed (%) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = row["dataset"].rsplit("/", 1)[-1]
        lines.append(
            f"| {'**all**' if name == ALL else name} | {row['groups']} | {row['k']} | "
            + " | ".join(
                f"{100 * row[key]:.1f}"
                for key in ("accuracy", "frac_all_correct", "frac_all_wrong", "frac_mixed")
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def run_census(
    model: Path,
    data: Path,
    out: Path,
    docs: Path,
    *,
    per_task: int,
    k: int,
    max_tokens: int,
    temperature: float,
    seed: int = 0,
    backend_factory: Any = None,
) -> dict[str, Any]:
    """Sample ``k`` responses for the first ``per_task`` training prompts of each task, from ``model``
    (the evaluation runner, HF backend, fp32), and write ``census.csv`` / ``census.md`` into ``docs``.

    Resumable: the sampled groups are kept under ``out`` (``recipe.evaluation``'s result store).

    Returns:
        the ``all`` row (every group).
    """
    import csv
    import json

    from recipe.evaluation.backends import SamplingConfig, make_backend
    from recipe.evaluation.runner import EvalConfig, run_evaluation

    subset = out / "census.parquet"
    problems = write_census_subset(data / "train.parquet", per_task, subset)
    print(
        f"[study] census: {len(problems)} training prompts x {k} samples from {model} "
        f"(T={temperature}, <= {max_tokens} tokens); results in {out}",
        flush=True,
    )
    cfg = EvalConfig(
        models=[str(model)],
        data=[str(subset)],
        out=out,
        k=k,
        sampling=SamplingConfig(temperature=temperature, max_tokens=max_tokens, seed=seed),
        backend="hf",
        dtype="float32",
    )
    run_evaluation(cfg, backend_factory=backend_factory or make_backend)
    with open(out / "samples.jsonl") as f:
        rows = census_rows(json.loads(line) for line in f if line.strip())
    docs.mkdir(parents=True, exist_ok=True)
    with open(docs / "census.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(CENSUS_COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({key: (f"{v:.6g}" if isinstance(v, float) else v) for key, v in row.items()})
    (docs / "census.md").write_text(census_markdown(rows))
    overall = rows[-1]
    print(
        f"[study] census: {overall['groups']} groups, accuracy {overall['accuracy']:.3f}, all correct "
        f"{overall['frac_all_correct']:.3f}, all wrong {overall['frac_all_wrong']:.3f}, mixed "
        f"{overall['frac_mixed']:.3f}; wrote {docs / 'census.md'}",
        flush=True,
    )
    return overall
