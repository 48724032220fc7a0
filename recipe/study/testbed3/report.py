"""The committed CSVs -> every number the docs state about the testbed v3 study.

:func:`report` reads only ``docs/study_cpu/testbed3/*.csv`` (written by ``recipe.study.common.collect`` and
``testbed3.levels``) and returns the markdown blocks that ``docs/STUDY_CPU.md``, ``docs/STUDY_PLAN.md``
and README include between ``<!-- generated: testbed3/... -->`` markers;
``tests/recipe/study/test_study_docs.py`` re-derives them from the CSVs. Nothing here reads a run folder.
The analysis every study shares (paired comparisons, Holm, the two-level bootstrap, the criteria, the
power) is ``recipe.study.common.analysis`` on v3's ``PLAN``; what is v3's own is its text, its per-level
table and its level census.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from recipe.study.common import analysis as a
from recipe.study.common.reporting import Comparison, interval, p_is, pct, problem_auc, read
from recipe.study.testbed3.levels import levels_markdown
from recipe.study.testbed3.plan import PLAN

TITLES = {
    "oneline": "Result",
    "levels": "Per level: what the policy knows and what it samples (step 0)",
    "criteria": "Testbed criteria",
    "comparisons": "Comparisons (primary endpoint)",
    "methods": "Methods",
    "per_level": "Per level",
    "pilot": "Power",
    "tuning": "Learning-rate tuning",
    "tuning_criteria": "Learning criterion on the tuning and pilot seeds",
    "real_trainer": "Confirmation through verl's trainer",
    "budget": "Machine time",
}


def criteria_markdown(runs: pd.DataFrame, blocks: pd.DataFrame, what: str) -> str:
    crit = a.criteria(PLAN, runs, blocks)
    g, low = crit["gain"], crit["regime"]
    lines = [
        f"- GRPO's validation accuracy gain ({what}; final - step 0, mean@k, {g.n} seeds): "
        f"{interval(g.mean, g.low, g.high)} points (95% t-interval); target >= {pct(PLAN.gain_target)} with the "
        f"interval above +{pct(PLAN.gain_floor)}: **{a.met(crit['gain_ok'])}**.",
        f"- Regime (GRPO, mean over seeds in each block of {PLAN.block_steps} steps, lowest block): zero-variance "
        f"groups {pct(low['all']['zero_variance'])}% (target >= {pct(PLAN.zero_variance_min)}); all-correct / "
        "all-wrong "
        + "; ".join(f"{t} {pct(low[t]['all_correct'])}% / {pct(low[t]['all_wrong'])}%" for t in PLAN.tasks)
        + f" (targets >= {pct(PLAN.all_correct_min)} each): **{a.met(crit['regime_ok'])}**.",
        "",
        "| method | zero variance (%) | all correct (%) | all wrong (%) |",
        "|---|---|---|---|",
    ]
    for method in PLAN.methods:
        if (blocks.method == method).any():
            b = a.regime(blocks, method).loc["all"]
            cells = [f"{pct(b[k].mean())} (min {pct(b[k].min())})" for k in a.SHARES]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Shares of the groups each step generated (dapo_filter: before filtering), mean over the {PLAN.block_steps}-step "
        "blocks and seeds (min: the lowest block). One task, so its shares are the overall ones.",
    ]
    return "\n".join(lines) + "\n"


def methods_markdown(runs: pd.DataFrame) -> str:
    lines = [
        "| method | seeds | lr | AUC (%) | start (%) | final (%) | gain (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in PLAN.methods:
        r = runs[runs.method == method]
        if r.empty:
            continue

        def ci(values: Sequence[float], signed: bool = False) -> str:
            return a.seed_interval(PLAN, values, signed)

        lines.append(
            f"| {method} | {len(r)} | {r.lr.iloc[0]:g} | {ci(r.auc)} | {pct(r.start.mean())} | {ci(r.final)} | "
            f"{ci(r.final - r.start, True)} |"
        )
    lines += [
        "",
        "Mean over seeds [95% t-interval]; validation mean@k of the 1,024 held-out problems at T = 1; AUC: the mean "
        "accuracy over training (trapezoid over the validation steps).",
    ]
    return "\n".join(lines) + "\n"


def level_auc(problems: pd.DataFrame, meta: dict[str, int], runs: pd.DataFrame) -> pd.DataFrame:
    """Per run and level: the mean per-problem AUC (one row per run, a column per level)."""
    out = []
    for _, r in runs.iterrows():
        auc = problem_auc(problems, meta, r.run)
        row = {"method": r.method, "seed": r.seed}
        for level, idx in problems.groupby("level").groups.items():
            row[level] = float(auc[np.asarray(list(idx))].mean())
        out.append(row)
    return pd.DataFrame(out)


def per_level_markdown(runs: pd.DataFrame, problems: pd.DataFrame, meta: dict[str, int]) -> str:
    table = level_auc(problems, meta, runs)
    levels = sorted(set(problems.level))
    lines = [
        "| | " + " | ".join(levels) + " |",
        "|---" * (len(levels) + 1) + "|",
    ]
    for method in PLAN.methods:
        lines.append(
            f"| {method}, AUC (%) | "
            + " | ".join(pct(table[table.method == method][lv].mean()) for lv in levels)
            + " |"
        )
    for treatment, control in (PLAN.primary, *PLAN.secondary):
        tests = [a.paired_t(PLAN, table, treatment, control, lv) for lv in levels]
        cells = [interval(t.mean, t.low, t.high) for t in tests]
        lines.append(f"| {treatment} - {control} (points) | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per level of the one task (256 validation problems each): AUC of mean@k, mean over seeds; differences paired by "
        "seed [95% t-interval], not corrected for multiplicity (descriptive). Per-problem values: `problems.csv`.",
    ]
    return "\n".join(lines) + "\n"


def budget_markdown(runs: pd.DataFrame, machine: pd.DataFrame | None) -> str:
    lines = [
        *a.phase_budget_lines(runs),
        "",
        a.total_line(runs, "the testbed's SFT continuation and the level census"),
    ]
    if machine is not None and len(machine):
        lines += [
            "",
            "Wall is the sum of the runs' times (two ran at a time, one thread each, on a 2-core machine shared with other "
            "sessions). At the phases' starts and ends "
            f"({len(machine)} measurements) the one-minute load average was {machine.load1.min():.1f}-"
            f"{machine.load1.max():.1f} and this machine's fp32 matmul speed at the model's shapes "
            f"(recipe/cpu_backend/roofline.py, one thread) {machine.gflops.min():.1f}-{machine.gflops.max():.1f} GFLOP/s.",
        ]
    return "\n".join(lines) + "\n"


def tuning_markdown(tuning: pd.DataFrame, chosen: dict[str, float]) -> str:
    lrs = sorted(set(tuning.lr))
    lines = [
        "| method | " + " | ".join(f"lr {lr:g}: AUC (final, gain)" for lr in lrs) + " | chosen |",
        "|---" * (len(lrs) + 2) + "|",
    ]
    for method in PLAN.methods:
        r = tuning[tuning.method == method]
        cells = []
        for lr in lrs:
            s = r[r.lr == lr]
            cells.append(
                f"{pct(s.auc.mean())} ({pct(s.final.mean())}, {pct((s.final - s.start).mean(), True)})"
                if len(s)
                else "n/a"
            )
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {chosen[method]:g} |")
    seeds = ", ".join(map(str, sorted(set(tuning.seed))))
    lines += [
        "",
        f"Validation mean@k (%), mean over the tuning seeds {seeds}: AUC (final accuracy, final - step 0 in points). "
        f"Rule: {PLAN.rate_rule}.",
    ]
    return "\n".join(lines) + "\n"


def oneline_markdown(runs: pd.DataFrame, comps: Sequence[Comparison], blocks: pd.DataFrame) -> str:
    t = comps[0].test
    crit = a.criteria(PLAN, runs, blocks)
    g = crit["gain"]
    return (
        f"> **Result in one line.** Testbed v3, {len(set(runs.seed))} seeds x {len(PLAN.methods)} methods x "
        f"{int(runs.steps.iloc[0])} steps, pre-registered (docs/STUDY_PLAN.md, amendment): COPO `soft_with_zero` - GRPO, "
        f"area under the validation curve: {interval(t.mean, t.low, t.high)} points ({p_is(t.p)}): "
        f"**{a.verdict(PLAN, comps[0], secondary=False)}**. GRPO gained {interval(g.mean, g.low, g.high)} points of "
        f"validation accuracy (learning criterion {a.met(crit['gain_ok'])}, regime criterion "
        f"{a.met(crit['regime_ok'])}); secondary: {a.secondary_line(comps)}.\n"
    )


def report(docs: Path) -> dict[str, str]:
    """Markdown blocks from the CSVs in ``docs`` (keys: the block names after ``testbed3/``)."""
    out: dict[str, str] = {}
    levels = read(docs, "levels.csv")
    if levels is not None:
        out["levels"] = levels_markdown(levels)
    pilot = read(docs, "pilot_runs.csv")
    machine = read(docs, "machine.csv")
    at_chosen = None
    if pilot is not None:
        tuning, chosen, at_chosen = a.tuning_at_chosen(PLAN, pilot)
        out["tuning"] = tuning_markdown(tuning, chosen)
        pilot_blocks = read(docs, "pilot_blocks.csv")
        grpo = at_chosen[at_chosen.method == PLAN.baseline]
        if pilot_blocks is not None and len(grpo) >= 2:
            blocks = pilot_blocks.merge(grpo[["run", "phase"]], on=["run", "phase"])
            out["tuning_criteria"] = (
                criteria_markdown(grpo, blocks, "tuning and pilot seeds at its tuned rate").split("\n\n")[0]
                + "\n"
            )
        paired_seeds = at_chosen[at_chosen.method.isin(PLAN.primary)].groupby("seed").method.nunique()
        if (paired_seeds == len(PLAN.primary)).sum() >= 2:  # the pilot has run
            out["pilot"] = a.mde_markdown(PLAN, at_chosen)
    c = a.confirmatory(PLAN, docs)
    if c is None:
        if pilot is not None:
            out["budget"] = budget_markdown(pilot, machine)
        return out
    out["criteria"] = criteria_markdown(c.runs, c.blocks, "confirmatory seeds")
    out["methods"] = methods_markdown(c.runs)
    if c.problems is not None and c.meta:
        out["per_level"] = per_level_markdown(c.runs, c.problems, c.meta)
    out.update(a.confirmatory_fragments(PLAN, c, oneline_markdown(c.runs, c.comps, c.blocks)))
    if at_chosen is not None:
        out["pilot"] = a.mde_markdown(PLAN, at_chosen, c.runs)
    out["budget"] = budget_markdown(
        pd.concat([pilot, c.runs_all]) if pilot is not None else c.runs_all, machine
    )
    return out


def summary_markdown(fragments: dict[str, str]) -> str:
    """All blocks as one document (``summary.md``), in a fixed order."""
    return a.summary_markdown(TITLES, fragments)
