"""The regime map across regimes, from each regime's committed ``runs.csv`` (docs/study_cpu/testbed4/<regime>/):
the docs' ``testbed4/regime_map`` block and the README's ``testbed4/when_to_use`` block.

Per regime (docs/STUDY_PLAN.md, "Amendment: regime map" and "Decided"): the primary comparison
``copo_soft_with_zero`` - ``grpo`` (paired over the confirmatory seeds: mean AUC difference, 95%
t-interval, two-sided p), Holm-corrected over the three regimes; the secondary family, this project's
variant against ``grpo`` and against ``copo_soft_with_zero``, Holm-corrected within the regime. Both
blocks appear only once every regime's confirmatory runs are in (Holm over the three regimes needs all
three).

What to pick (``when_to_use``), a rule fixed here before the data: a COPO method is recommended over
GRPO in a regime only where its comparison with GRPO is significant and positive after Holm (the paper's
setting: Holm over the regimes; the variant: Holm within the regime); where both are, the one with the
larger mean difference; otherwise GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from recipe.study.common import analysis as a
from recipe.study.common.plan import StudyPlan
from recipe.study.common.reporting import interval, pvalue, read


@dataclass(frozen=True)
class Row:
    """One comparison in one regime: the paired AUC difference over the confirmatory seeds."""

    regime: str
    target: float  # the knob: the target share of all-wrong groups at step 0
    treatment: str
    control: str
    family: str  # "primary" (Holm over the regimes) or "secondary" (Holm within the regime)
    seeds: int
    mean: float
    low: float
    high: float
    p: float
    holm_p: float
    alpha: float
    baseline: str  # the plan's baseline (GRPO): what "a gain" is measured against

    @property
    def against_baseline(self) -> bool:
        return self.control == self.baseline

    @property
    def significant_gain(self) -> bool:
        return self.holm_p <= self.alpha and self.mean > 0


def regime_map(plans: dict[str, StudyPlan], targets: dict[str, float], docs: Path) -> list[Row] | None:
    """Every regime's comparisons from ``docs/<regime>/runs.csv`` (None until every regime has its
    confirmatory runs)."""
    rows: list[Row] = []
    primary_rows: list[Row] = []
    for regime, plan in plans.items():
        runs = read(docs / regime, "runs.csv")
        if runs is None or not (runs.phase == "confirmatory").any():
            return None
        comps = a.comparisons(plan, runs[runs.phase == "confirmatory"], None, None)
        for i, c in enumerate(comps):
            t = c.test
            row = Row(regime, targets[regime], c.treatment, c.control, "primary" if i == 0 else "secondary",
                      t.n, t.mean, t.low, t.high, t.p, c.holm_p if c.holm_p is not None else t.p,
                      plan.alpha, plan.baseline)  # fmt: skip
            (primary_rows if i == 0 else rows).append(row)
    holm = a.holm([r.p for r in primary_rows])
    primary = [Row(**{**r.__dict__, "holm_p": h}) for r, h in zip(primary_rows, holm, strict=True)]
    return primary + rows


def _cell(r: Row) -> str:
    return f"{interval(r.mean, r.low, r.high)} | {pvalue(r.p)} | {pvalue(r.holm_p)}"


def regime_map_markdown(rows: list[Row]) -> str:
    regimes = list(dict.fromkeys(r.regime for r in rows))
    secondary = list(dict.fromkeys((r.treatment, r.control) for r in rows if r.family == "secondary"))
    head = "| regime | target all wrong (%) | seeds | copo_soft_with_zero - grpo (points) [95% t] | p | Holm p (3 regimes) |"
    rule = "|---|---|---|---|---|---|"
    for t, c in secondary:
        head += f" {t} - {c} (points) [95% t] | p | Holm p (within regime) |"
        rule += "---|---|---|"
    lines = [head, rule]
    for regime in regimes:
        mine = [r for r in rows if r.regime == regime]
        primary = next(r for r in mine if r.family == "primary")
        cells = [f"| {regime} | {100 * primary.target:.0f} | {primary.seeds} | {_cell(primary)} |"]
        for t, c in secondary:
            r = next(x for x in mine if (x.treatment, x.control) == (t, c))
            cells.append(f" {_cell(r)} |")
        lines.append("".join(cells))
    lines += [
        "",
        "Paired over the confirmatory seeds: the difference of the area under the validation "
        "mean@4 curve, in points, with its 95% t-interval and two-sided p; the primary comparison Holm-corrected over "
        "the three regimes, the variant's two comparisons within each regime (docs/STUDY_PLAN.md).",
    ]
    return "\n".join(lines) + "\n"


def pick(rows: list[Row], regime: str) -> str:
    """The module's rule: a COPO method over GRPO only where its gain over GRPO is significant after Holm."""
    mine = [r for r in rows if r.regime == regime]
    gains = [r for r in mine if r.against_baseline and r.significant_gain]
    if not gains:
        return mine[0].baseline
    return max(gains, key=lambda r: r.mean).treatment


def when_to_use_markdown(rows: list[Row]) -> str:
    lines = [
        "| data (share of all-wrong groups at step 0) | COPO (paper, `soft_with_zero`) - GRPO, AUC points | "
        "this project's variant - GRPO, AUC points | pick |",
        "|---|---|---|---|",
    ]
    for regime in dict.fromkeys(r.regime for r in rows):
        mine = {(r.treatment, r.control): r for r in rows if r.regime == regime}
        paper = mine[("copo_soft_with_zero", "grpo")]
        variant = mine[("copo_variant_nonpositive", "grpo")]
        lines.append(
            f"| {regime}: about {100 * paper.target:.0f}% | {interval(paper.mean, paper.low, paper.high)} "
            f"(Holm p {pvalue(paper.holm_p)}) | {interval(variant.mean, variant.low, variant.high)} "
            f"(Holm p {pvalue(variant.holm_p)}) | `{pick(rows, regime)}` |"
        )
    lines += [
        "",
        "Testbed v4 (CPU, a 1M-parameter policy; docs/STUDY_CPU.md, regime map): mean paired difference over the "
        "confirmatory seeds [95% t-interval]. Pick: a COPO method only where its gain over GRPO is significant after "
        "Holm (the larger gain if both are), otherwise GRPO.",
    ]
    return "\n".join(lines) + "\n"


def fragments(plans: dict[str, StudyPlan], targets: dict[str, float], docs: Path) -> dict[str, str]:
    """``regime_map`` and ``when_to_use`` (the ``testbed4/`` blocks), once every regime's runs are in."""
    rows = regime_map(plans, targets, docs)
    if rows is None:
        return {}
    return {"regime_map": regime_map_markdown(rows), "when_to_use": when_to_use_markdown(rows)}


def as_frame(rows: list[Row]) -> pd.DataFrame:
    """The map as a table (one row per regime and comparison), for a CSV or a plot."""
    return pd.DataFrame([r.__dict__ for r in rows])
