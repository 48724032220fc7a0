"""Resumable on-disk results: one samples file and one summary file per (checkpoint, dataset).

Layout under ``--out``::

    pairs/<checkpoint>/<dataset>.samples.jsonl   every sample of the pair
    pairs/<checkpoint>/<dataset>.summary.json    metrics + sampling parameters; written last,
                                                 so its presence marks the pair complete
    summary.csv, summary.md                      rebuilt from all complete pairs after each pair
    samples.jsonl                                every complete pair's samples, rebuilt at the end

Every file is written to a temporary sibling and renamed into place, so a crash loses at most
the pair in flight and never leaves a half-written file that a rerun would trust.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from recipe.files import atomic_file, atomic_write_text

# Parameters that must match for a stored pair to be reused.
RESUME_KEYS = ("k", "temperature", "top_p", "max_tokens", "seed", "problems_fingerprint")
SUMMARY_COLUMNS = (
    "checkpoint",
    "step",
    "dataset",
    "n_problems",
    "k",
    "mean@k",
    "maj@k",
    "pass@k",
    "mean_response_tokens",
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "backend",
    "model_path",
    "wall_s",
)


def slug(name: str) -> str:
    """File-system safe, collision-free name: readable part plus a short hash of the original."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "x"
    return f"{readable}-{hashlib.sha1(name.encode()).hexdigest()[:6]}"


class ResultStore:
    """Reads and writes the per-pair files under one output folder."""

    def __init__(self, out_dir: str | Path):
        self.out_dir = Path(out_dir)
        self.pairs_dir = self.out_dir / "pairs"

    def _paths(self, checkpoint: str, dataset: str) -> tuple[Path, Path]:
        base = self.pairs_dir / slug(checkpoint) / slug(dataset)
        return base.with_name(base.name + ".samples.jsonl"), base.with_name(base.name + ".summary.json")

    def completed(self, checkpoint: str, dataset: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The stored summary when the pair is complete with the same parameters, else None.

        Raises:
            ValueError: the pair is complete but was run with other parameters (mixing them in one
                table would be wrong); the message names the differing keys.
        """
        samples_path, summary_path = self._paths(checkpoint, dataset)
        if not (summary_path.is_file() and samples_path.is_file()):
            return None
        summary = json.loads(summary_path.read_text())
        diffs = {
            key: (summary.get(key), params[key]) for key in RESUME_KEYS if summary.get(key) != params[key]
        }
        if diffs:
            detail = ", ".join(f"{k}: stored {a!r} vs now {b!r}" for k, (a, b) in diffs.items())
            raise ValueError(
                f"{self.out_dir} already holds {checkpoint} x {dataset} evaluated with other settings "
                f"({detail}); use another --out, or --overwrite to redo it"
            )
        return summary

    def write_pair(self, summary: Mapping[str, Any], samples: Iterable[Mapping[str, Any]]) -> None:
        """Store a finished pair: samples first, then the summary that marks it complete."""
        samples_path, summary_path = self._paths(summary["checkpoint"], summary["dataset"])
        lines = "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in samples)
        atomic_write_text(samples_path, lines)
        atomic_write_text(summary_path, json.dumps(dict(summary), indent=1, ensure_ascii=False) + "\n")

    def remove_pair(self, checkpoint: str, dataset: str) -> None:
        for path in self._paths(checkpoint, dataset):
            path.unlink(missing_ok=True)

    def summaries(self) -> list[dict[str, Any]]:
        """Every complete pair's summary, ordered by checkpoint (run, step, name) then dataset."""
        rows = []
        for summary_path in self.pairs_dir.glob("*/*.summary.json"):
            samples_path = summary_path.with_name(
                summary_path.name[: -len(".summary.json")] + ".samples.jsonl"
            )
            if samples_path.is_file():
                rows.append(json.loads(summary_path.read_text()))
        return sorted(rows, key=_row_order)

    def samples_file(self, checkpoint: str, dataset: str) -> Path:
        return self._paths(checkpoint, dataset)[0]

    def rebuild_summaries(self) -> list[dict[str, Any]]:
        """Rewrite summary.csv and summary.md from the complete pairs (cheap: after every pair)."""
        rows = self.summaries()
        atomic_write_text(self.out_dir / "summary.csv", summary_csv(rows))
        atomic_write_text(self.out_dir / "summary.md", summary_markdown(rows))
        return rows

    def rebuild_samples(self) -> Path:
        """Concatenate every complete pair's samples into samples.jsonl (streamed: it can be GBs)."""
        target = self.out_dir / "samples.jsonl"
        with atomic_file(target, "wb") as out:
            for row in self.summaries():
                with self.samples_file(row["checkpoint"], row["dataset"]).open("rb") as src:
                    shutil.copyfileobj(src, out)
        return target


def _row_order(row: Mapping[str, Any]) -> tuple:
    run = row["checkpoint"].rsplit("/", 1)[0] if row.get("step") is not None else row["checkpoint"]
    step = row["step"] if row.get("step") is not None else -1
    return (run, step, row["checkpoint"], row["dataset"])


def summary_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Long table, one row per (checkpoint, dataset); accuracies as fractions in [0, 1]."""
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=list(SUMMARY_COLUMNS), extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in SUMMARY_COLUMNS})
    return buffer.getvalue()


def _pct(value: float) -> str:
    return f"{100 * value:.2f}"


def summary_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """A paper-style table (checkpoint x dataset, mean@k / maj@k in %) and the long table."""
    if not rows:
        return "No complete (checkpoint, dataset) pairs yet.\n"
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    checkpoints = list(dict.fromkeys(r["checkpoint"] for r in rows))
    by_pair = {(r["checkpoint"], r["dataset"]): r for r in rows}
    k_of = {d: sorted({r["k"] for r in rows if r["dataset"] == d}) for d in datasets}

    def header_for(d: str) -> str:
        ks = "/".join(str(k) for k in k_of[d])
        return f"{d} mean@{ks} / maj@{ks}"

    lines = ["## Accuracy (%)", "", "| checkpoint | " + " | ".join(header_for(d) for d in datasets) + " |"]
    lines.append("|---|" + "---|" * len(datasets))
    for c in checkpoints:
        cells = []
        for d in datasets:
            r = by_pair.get((c, d))
            cells.append(f"{_pct(r['mean@k'])} / {_pct(r['maj@k'])}" if r else "-")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## All metrics",
        "",
        "| checkpoint | dataset | n | k | mean@k (%) | maj@k (%) | pass@k (%) | mean response tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['checkpoint']} | {r['dataset']} | {r['n_problems']} | {r['k']} | {_pct(r['mean@k'])} | "
            f"{_pct(r['maj@k'])} | {_pct(r['pass@k'])} | {r['mean_response_tokens']:.1f} |"
        )
    settings = {(r["temperature"], r["top_p"], r["max_tokens"], r["seed"], r["backend"]) for r in rows}
    if len(settings) == 1:
        temperature, top_p, max_tokens, seed, backend = settings.pop()
        note = (
            f"Sampling: temperature {temperature}, top_p {top_p}, max tokens {max_tokens}, seed {seed}, "
            f"backend {backend}."
        )
    else:
        note = "Sampling settings differ between rows: see summary.csv."
    lines += ["", note, ""]
    return "\n".join(lines)
