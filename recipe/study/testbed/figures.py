"""Every figure the docs state about the v1 testbed study (2026-11-24), from its committed CSVs.

``docs/STUDY_CPU.md`` and ``README.md`` include these fragments between ``<!-- generated: testbed/NAME -->``
markers (``recipe.study.common.docs``); ``tests/recipe/study/test_study_docs.py`` re-derives them from
``docs/study_cpu/testbed/{runs,signal}.csv`` and compares. The provenance line names the commit that
added the results, read from git (the runs themselves record no commit).
"""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path
from typing import Any

from recipe.files import REPO_ROOT
from recipe.study.census import census_markdown, read_census
from recipe.study.methods import BASELINE
from recipe.study.testbed import analysis

DOCS = REPO_ROOT / "docs" / "study_cpu" / "testbed"
DAPO, COPO_MODES = "dapo_filter", ("copo_soft_with_zero", "copo_soft", "copo_global_only")


def _number(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def read_rows(path: Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _load(
    docs: Path,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    per_run = read_rows(docs / "runs.csv")
    signal = {r["method"]: r for r in read_rows(docs / "signal.csv")}
    methods = list(dict.fromkeys(r["method"] for r in per_run))
    summary = analysis.method_summary(per_run, methods)
    return per_run, summary, [signal[m] for m in methods], signal


def _diff(summary: list[dict[str, Any]], method: str, statistic: str = "final_acc") -> str:
    row = next(r for r in summary if r["method"] == method and r["statistic"] == statistic)
    return f"{100 * row['diff_mean']:+.1f} [{100 * row['diff_low']:+.1f}, {100 * row['diff_high']:+.1f}]"


def _span(values: list[float], fmt: str) -> str:
    """``"lo-hi"`` of ``values`` formatted with ``fmt``, or one number when both ends print the same."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def _ratios(signal: dict[str, Any]) -> tuple[float, float]:
    """DAPO's training time and wall time per run (start-up included), over GRPO's."""
    return (
        signal[DAPO]["train_s"] / signal[BASELINE]["train_s"],
        signal[DAPO]["run_wall_s"] / signal[BASELINE]["run_wall_s"],
    )


def results_commit(docs: Path = DOCS) -> str | None:
    """The short hash of the commit that added ``runs.csv`` (None without git history)."""
    try:
        out = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%h", "--", str(docs / "runs.csv")],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out[-1] if out else None


def fragments(docs: Path = DOCS, commit: str | None = None) -> dict[str, str]:
    """Markdown fragments keyed by name (without the ``testbed/`` prefix)."""
    per_run, summary, signal_rows, signal = _load(docs)
    train_ratio, run_ratio = _ratios(signal)
    total_min = sum(r["run_wall_s"] for r in per_run) / 60
    seeds = sorted({r["seed"] for r in per_run})
    steps = per_run[0]["steps"]
    methods = list(dict.fromkeys(r["method"] for r in per_run))
    start = per_run[0]["start_acc"]
    final_means = {
        m: next(r["mean"] for r in summary if r["method"] == m and r["statistic"] == "final_acc")
        for m in methods
    }
    best_gain = max(final_means.values()) - start
    widest = max(abs(v - start) for v in final_means.values())
    significant = [m for m in methods if m != BASELINE and any(
        r["method"] == m and r["statistic"] == "final_acc" and r.get("significant") for r in summary
    )]  # fmt: skip
    nonzero = [signal[m]["frac_nonzero_adv"] for m in COPO_MODES]
    others = [signal[m] for m in methods if m != DAPO]
    out: dict[str, str] = {}
    note = (
        f"Budget: {steps} steps per run, 16 prompts x 4 responses per step, greedy validation every 5 steps "
        "(recipe/copo/config/testbed_cpu.yaml)."
    )
    out["results"] = analysis.markdown(summary, signal_rows, analysis.THRESHOLD_GAIN, note)
    out["census"] = census_markdown(read_census(docs / "census.csv"))
    out["oneline"] = (
        f"> **Result in one line.** {len(seeds)} seeds x {len(methods)} methods x {steps} steps (the runs' wall times sum "
        f"to {total_min:.0f} min, two at a time): "
        + " and ".join(f"`{m}` ({_diff(summary, m)} points final accuracy)" for m in significant)
        + " beat GRPO significantly, by small margins; "
        + ", ".join(f"`{m}`" for m in methods if m not in significant and m != BASELINE)
        + f" do not differ significantly from GRPO; no method gained more than {100 * best_gain:.1f} points over the "
        f"SFT policy ({100 * start:.1f}%). Superseded by testbed v2 below.\n"
    )
    out["budget"] = (
        f"{len(per_run)} runs ({len(methods)} methods x seeds {seeds[0]}-{seeds[-1]}, {steps} steps each, two at a "
        f"time with one thread each); the runs' wall times sum to {total_min:.1f} min. A GRPO/COPO run took "
        f"{_span([s['run_wall_s'] / 60 for s in others], '.1f')} min including start-up "
        f"({_span([s['mean_step_s'] for s in others], '.1f')} s a step, {_span([s['val_s_each'] for s in others], '.1f')} "
        f"s a validation); a DAPO run {signal[DAPO]['run_wall_s'] / 60:.1f} min ({signal[DAPO]['generated_per_useful']:.1f} "
        f"responses generated per useful one): {train_ratio:.2f}x GRPO's training time, {run_ratio:.2f}x its wall time "
        "per run with start-up.\n"
    )
    out["reading"] = (
        f"Reading: every method's mean final accuracy stayed within {100 * widest:.1f} points of the SFT policy's "
        f"{100 * start:.1f}%, so these are small effects measured precisely, not learning curves. COPO's variants gave a non-zero advantage to "
        f"{_span([100 * v for v in nonzero], '.1f')}% "
        f"of responses against GRPO's {100 * signal[BASELINE]['frac_nonzero_adv']:.1f}% at the same step cost. "
        f"`copo_global_only` (no local term) trended below GRPO (final {_diff(summary, 'copo_global_only')}). "
        f"DAPO filtering gained most ({_diff(summary, DAPO)}), at {train_ratio:.2f}x GRPO's training time "
        f"({run_ratio:.2f}x per run with start-up).\n"
    )
    commit = commit if commit is not None else results_commit(docs)
    if commit is not None:
        out["provenance"] = (
            f"The committed results were added in commit {commit}; the runs record no commit of their own (they ran "
            "on the code of that commit's history).\n"
        )
    out["readme"] = (
        f"Measured here ({len(seeds)} seeds x {len(methods)} methods x {steps} steps, the runs' wall times summing to "
        f"{total_min:.0f} min): final accuracy vs GRPO's "
        f"{100 * next(r['mean'] for r in summary if r['method'] == BASELINE and r['statistic'] == 'final_acc'):.1f}%, "
        "paired by seed: "
        + ", ".join(f"`{m}` {_diff(summary, m)}" for m in methods if m != BASELINE)
        + f" (significant: {', '.join(f'`{m}`' for m in significant) or 'none'}); COPO gave a non-zero advantage to "
        f"{_span([100 * v for v in nonzero], '.1f')}% of responses against GRPO's "
        f"{100 * signal[BASELINE]['frac_nonzero_adv']:.1f}%; no method's mean final accuracy gained more than "
        f"{100 * best_gain:.1f} points over the SFT policy.\n"
    )
    return out
