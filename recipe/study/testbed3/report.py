"""The committed CSVs -> every number the docs state about the testbed v3 study.

:func:`report` reads only ``docs/study_cpu/testbed3/*.csv`` (written by ``recipe.study.common.collect`` and
``testbed3.levels``) and returns the markdown blocks that ``docs/STUDY_CPU.md``, ``docs/STUDY_PLAN.md``
and README include between ``<!-- generated: testbed3/... -->`` markers;
``tests/recipe/study/test_study_docs.py`` re-derives them from the CSVs. Nothing here reads a run folder.

Statistics (``recipe.stats``) as in v2's report: paired t-intervals and p-values over seeds, Holm over
the secondary family, a two-level (seeds x problems) percentile bootstrap, the minimum detectable effect.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recipe import stats as paired
from recipe.study.common.reporting import (
    RESAMPLES,
    Comparison,
    interval,
    p_is,
    pct,
    problem_auc,
    pvalue,
    read,
)
from recipe.study.testbed3 import plan
from recipe.study.testbed3.levels import levels_markdown

RATE_RULE = "highest mean AUC over the tuning seeds (ties: the smaller rate)"
_SHARES = ("zero_variance", "all_correct", "all_wrong")


def _paired(runs: pd.DataFrame, treatment: str, control: str, column: str) -> paired.PairedT:
    t = runs[runs.method == treatment].set_index("seed")[column]
    c = runs[runs.method == control].set_index("seed")[column]
    seeds = sorted(set(t.index) & set(c.index))
    if len(seeds) < 2:
        raise ValueError(f"{treatment} vs {control}: {len(seeds)} paired seeds")
    return paired.paired_t([float(t[s] - c[s]) for s in seeds], plan.ALPHA)


def _diff_matrix(
    problems: pd.DataFrame, meta: dict[str, int], seeds: Sequence[int], t: str, c: str
) -> np.ndarray:
    return np.stack(
        [problem_auc(problems, meta, f"{t}-s{s}") - problem_auc(problems, meta, f"{c}-s{s}") for s in seeds]
    )


def comparisons(
    runs: pd.DataFrame, problems: pd.DataFrame | None, meta: dict[str, int] | None
) -> list[Comparison]:
    """The primary comparison, then the secondary family with Holm-adjusted p (endpoint: AUC)."""
    out = []
    for treatment, control in (plan.PRIMARY, *plan.SECONDARY):
        boot = None
        if problems is not None and meta:
            seeds = sorted(set(runs[runs.method == treatment].seed) & set(runs[runs.method == control].seed))
            diff = _diff_matrix(problems, meta, seeds, treatment, control)
            boot = paired.two_level_bootstrap(diff, 1 - plan.ALPHA, RESAMPLES, seed=0)
        out.append(Comparison(treatment, control, "auc", _paired(runs, treatment, control, "auc"), boot=boot))
    for c, p in zip(out[1:], paired.holm([c.test.p for c in out[1:]]), strict=True):
        c.holm_p = p
    return out


def verdict(c: Comparison, secondary: bool) -> str:
    p = c.holm_p if secondary else c.test.p
    if p is None or p > plan.ALPHA:
        return "no significant difference"
    return f"{c.treatment} {'higher' if c.test.mean > 0 else 'lower'}"


def regime(blocks: pd.DataFrame, method: str) -> pd.DataFrame:
    """Per task and block: the shares of zero-variance, all-correct and all-wrong groups, mean over seeds."""
    return blocks[blocks.method == method].groupby(["task", "first_step"])[list(_SHARES)].mean()


def criteria(runs: pd.DataFrame, blocks: pd.DataFrame, method: str = plan.BASELINE) -> dict[str, Any]:
    """The testbed's learning and regime criteria for ``method`` (docs/STUDY_PLAN.md, amendment)."""
    mine = runs[runs.method == method]
    gain = paired.paired_t((mine.final - mine.start).tolist(), plan.ALPHA)
    per_block = regime(blocks, method)
    lowest = {
        task: {k: float(per_block.loc[task][k].min()) for k in _SHARES} for task in (*plan.TASKS, "all")
    }
    tasks_ok = all(
        lowest[t]["all_correct"] >= plan.ALL_CORRECT_MIN and lowest[t]["all_wrong"] >= plan.ALL_WRONG_MIN
        for t in plan.TASKS
    )
    return {
        "gain": gain,
        "gain_ok": gain.mean >= plan.GAIN_TARGET and gain.low > plan.GAIN_FLOOR,
        "regime": lowest,
        "regime_ok": lowest["all"]["zero_variance"] >= plan.ZERO_VARIANCE_MIN and tasks_ok,
    }


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def criteria_markdown(runs: pd.DataFrame, blocks: pd.DataFrame, what: str) -> str:
    crit = criteria(runs, blocks)
    g, low = crit["gain"], crit["regime"]
    lines = [
        f"- GRPO's validation accuracy gain ({what}; final - step 0, mean@k, {g.n} seeds): "
        f"{interval(g.mean, g.low, g.high)} points (95% t-interval); target >= {pct(plan.GAIN_TARGET)} with the "
        f"interval above +{pct(plan.GAIN_FLOOR)}: **{_met(crit['gain_ok'])}**.",
        f"- Regime (GRPO, mean over seeds in each block of {plan.BLOCK_STEPS} steps, lowest block): zero-variance "
        f"groups {pct(low['all']['zero_variance'])}% (target >= {pct(plan.ZERO_VARIANCE_MIN)}); all-correct / "
        "all-wrong "
        + "; ".join(f"{t} {pct(low[t]['all_correct'])}% / {pct(low[t]['all_wrong'])}%" for t in plan.TASKS)
        + f" (targets >= {pct(plan.ALL_CORRECT_MIN)} each): **{_met(crit['regime_ok'])}**.",
        "",
        "| method | zero variance (%) | all correct (%) | all wrong (%) |",
        "|---|---|---|---|",
    ]
    for method in plan.METHODS:
        if (blocks.method == method).any():
            b = regime(blocks, method).loc["all"]
            cells = [f"{pct(b[k].mean())} (min {pct(b[k].min())})" for k in _SHARES]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Shares of the groups each step generated (dapo_filter: before filtering), mean over the {plan.BLOCK_STEPS}-step "
        "blocks and seeds (min: the lowest block). One task, so its shares are the overall ones.",
    ]
    return "\n".join(lines) + "\n"


def methods_markdown(runs: pd.DataFrame) -> str:
    lines = [
        "| method | seeds | lr | AUC (%) | start (%) | final (%) | gain (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in plan.METHODS:
        r = runs[runs.method == method]
        if r.empty:
            continue

        def ci(values: Sequence[float], signed: bool = False) -> str:
            t = paired.paired_t(list(values), plan.ALPHA)
            return interval(t.mean, t.low, t.high, signed)

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


def comparisons_markdown(comps: Sequence[Comparison]) -> str:
    primary = comps[0]
    t = primary.test
    lines = [
        f"**Primary** ({primary.name}, AUC of validation mean@k, {t.n} paired seeds): "
        f"{interval(t.mean, t.low, t.high)} points (95% t-interval), {p_is(t.p)}"
        + (f"; two-level bootstrap (seeds x problems) {interval(*primary.boot)}" if primary.boot else "")
        + f": **{verdict(primary, secondary=False)}**.",
        "",
        "| comparison | AUC difference (points) [95% t-interval] | p | Holm p | two-level bootstrap [95%] | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for c in comps:
        holm = "(primary)" if c.holm_p is None else pvalue(c.holm_p)
        boot = interval(*c.boot) if c.boot else "n/a"
        lines.append(
            f"| {c.name} | {interval(c.test.mean, c.test.low, c.test.high)} | {pvalue(c.test.p)} | {holm} | {boot} | "
            f"{verdict(c, secondary=c.holm_p is not None)} |"
        )
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
    for method in plan.METHODS:
        lines.append(
            f"| {method}, AUC (%) | "
            + " | ".join(pct(table[table.method == method][lv].mean()) for lv in levels)
            + " |"
        )
    for treatment, control in (plan.PRIMARY, *plan.SECONDARY):
        cells = [
            interval(*(lambda t: (t.mean, t.low, t.high))(_paired(table, treatment, control, lv)))
            for lv in levels
        ]
        lines.append(f"| {treatment} - {control} (points) | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per level of the one task (256 validation problems each): AUC of mean@k, mean over seeds; differences paired by "
        "seed [95% t-interval], not corrected for multiplicity (descriptive). Per-problem values: `problems.csv`.",
    ]
    return "\n".join(lines) + "\n"


def budget_markdown(runs: pd.DataFrame, machine: pd.DataFrame | None, build_s: float | None = None) -> str:
    lines = [
        "| phase | runs | wall (min) | CPU (min) | CPU per run (s) | generated / useful responses |",
        "|---|---|---|---|---|---|",
    ]
    for phase, r in runs.groupby("phase", sort=False):
        useful = r.useful_samples.sum()
        lines.append(
            f"| {phase} | {len(r)} | {r.wall_s.sum() / 60:.1f} | {r.cpu_s.sum() / 60:.1f} | "
            f"{r.cpu_s.mean():.0f} | {r.generated_samples.sum() / useful if useful else math.nan:.2f} |"
        )
    lines += [
        "",
        f"In all: {len(runs)} runs, {runs.wall_s.sum() / 3600:.2f} h of run wall time and "
        f"{runs.cpu_s.sum() / 3600:.2f} h of CPU time (the testbed's SFT continuation and the level census not included).",
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


def mde_markdown(pilot: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """The minimum detectable effect of the primary comparison from the pilot (and, once run, the study)."""
    test = _paired(pilot, *plan.PRIMARY, "auc")
    n = len(plan.CONFIRMATORY_SEEDS)
    mde = paired.minimum_detectable_effect(test.sd, n, plan.ALPHA, plan.POWER)
    fewer = ", ".join(
        f"{100 * paired.minimum_detectable_effect(test.sd, k, plan.ALPHA, plan.POWER):.2f} with {k}"
        for k in plan.POWER_SEEDS
        if k != n
    )
    line = (
        f"Pilot ({test.n} paired seeds, {', '.join(map(str, sorted(set(pilot.seed))))}): SD of the paired AUC difference "
        f"{100 * test.sd:.2f} points, so with {n} seeds a two-sided paired t-test at alpha {plan.ALPHA} detects a mean "
        f"difference of **{100 * mde:.2f} points** with {plan.POWER:.0%} power ({fewer} seeds; the pilot's own mean "
        f"difference: {100 * test.mean:+.2f})."
    )
    if runs is not None:
        achieved = _paired(runs, *plan.PRIMARY, "auc")
        achieved_mde = paired.minimum_detectable_effect(achieved.sd, achieved.n, plan.ALPHA, plan.POWER)
        line += (
            f" In the confirmatory runs ({achieved.n} paired seeds) the SD was {100 * achieved.sd:.2f} points: "
            f"{100 * achieved_mde:.2f} points at {plan.POWER:.0%} power."
        )
    return line + "\n"


def choose_learning_rates(tuning: pd.DataFrame) -> dict[str, float]:
    """Per method, the grid learning rate with the highest mean AUC over the tuning seeds (ties: the smaller)."""
    out = {}
    for method in plan.METHODS:
        means = tuning[tuning.method == method].groupby("lr").auc.mean()
        best = means.max()
        out[method] = float(min(lr for lr, v in means.items() if v == best))
    return out


def tuning_markdown(tuning: pd.DataFrame, chosen: dict[str, float]) -> str:
    lrs = sorted(set(tuning.lr))
    lines = [
        "| method | " + " | ".join(f"lr {lr:g}: AUC (final, gain)" for lr in lrs) + " | chosen |",
        "|---" * (len(lrs) + 2) + "|",
    ]
    for method in plan.METHODS:
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
        f"Rule: {RATE_RULE}.",
    ]
    return "\n".join(lines) + "\n"


def real_trainer_markdown(real: pd.DataFrame, fast: pd.DataFrame) -> str:
    treatment, control = plan.REAL_TRAINER_METHODS
    lines = [
        f"| trainer | seeds | start (%) | final {control} (%) | final {treatment} (%) | {treatment} - {control}, final (points) |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in (("verl (main_copo)", real), ("fast, same seeds", fast[fast.seed.isin(set(real.seed))])):
        d = _paired(r, treatment, control, "final")
        lines.append(
            f"| {label} | {d.n} | {pct(r.start.mean())} | {pct(r[r.method == control].final.mean())} | "
            f"{pct(r[r.method == treatment].final.mean())} | {interval(d.mean, d.low, d.high)} |"
        )
    gains = real.final - real.start
    lines += ["", f"verl's runs gained {pct(gains.mean(), True)} points on average (final - step 0)."]
    return "\n".join(lines) + "\n"


def oneline_markdown(runs: pd.DataFrame, comps: Sequence[Comparison], blocks: pd.DataFrame) -> str:
    primary = comps[0]
    t = primary.test
    crit = criteria(runs, blocks)
    g = crit["gain"]
    secondary = "; ".join(
        f"{c.name} {interval(c.test.mean, c.test.low, c.test.high)} ({p_is(c.holm_p or 1.0, 'Holm p')})"
        for c in comps[1:]
    )
    return (
        f"> **Result in one line.** Testbed v3, {len(set(runs.seed))} seeds x {len(plan.METHODS)} methods x "
        f"{int(runs.steps.iloc[0])} steps, pre-registered (docs/STUDY_PLAN.md, amendment): COPO `soft_with_zero` - GRPO, "
        f"area under the validation curve: {interval(t.mean, t.low, t.high)} points ({p_is(t.p)}): "
        f"**{verdict(primary, secondary=False)}**. GRPO gained {interval(g.mean, g.low, g.high)} points of validation "
        f"accuracy (learning criterion {_met(crit['gain_ok'])}, regime criterion {_met(crit['regime_ok'])}); "
        f"secondary: {secondary}.\n"
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
        tuning = pilot[pilot.phase == "tuning"]
        chosen = choose_learning_rates(tuning)
        at_chosen = pilot[pilot.apply(lambda r: math.isclose(r.lr, chosen[r.method]), axis=1)]
        out["tuning"] = tuning_markdown(tuning, chosen)
        pilot_blocks = read(docs, "pilot_blocks.csv")
        grpo = at_chosen[at_chosen.method == plan.BASELINE]
        if pilot_blocks is not None and len(grpo) >= 2:
            blocks = pilot_blocks.merge(grpo[["run", "phase"]], on=["run", "phase"])
            out["tuning_criteria"] = (
                criteria_markdown(grpo, blocks, "tuning and pilot seeds at its tuned rate").split("\n\n")[0]
                + "\n"
            )
        paired_seeds = at_chosen[at_chosen.method.isin(plan.PRIMARY)].groupby("seed").method.nunique()
        if (paired_seeds == len(plan.PRIMARY)).sum() >= 2:  # the pilot has run
            out["pilot"] = mde_markdown(at_chosen)
    runs_all = read(docs, "runs.csv")
    if runs_all is None:
        if pilot is not None:
            out["budget"] = budget_markdown(pilot, machine)
        return out
    runs = runs_all[runs_all.phase == "confirmatory"]
    problems = read(docs, "problems.csv")
    meta = json.loads((docs / "problems.json").read_text()) if (docs / "problems.json").is_file() else None
    blocks = read(docs, "blocks.csv")
    confirmatory_blocks = blocks[blocks.phase == "confirmatory"]
    comps = comparisons(runs, problems, meta)
    out["criteria"] = criteria_markdown(runs, confirmatory_blocks, "confirmatory seeds")
    out["methods"] = methods_markdown(runs)
    out["comparisons"] = comparisons_markdown(comps)
    if problems is not None and meta:
        out["per_level"] = per_level_markdown(runs, problems, meta)
    out["oneline"] = oneline_markdown(runs, comps, confirmatory_blocks)
    out["readme"] = out["oneline"].replace("> **Result in one line.** ", "Measured here: ")
    if at_chosen is not None:
        out["pilot"] = mde_markdown(at_chosen, runs)
    real = runs_all[runs_all.phase == "real"]
    if len(real):
        out["real_trainer"] = real_trainer_markdown(real, runs)
    out["budget"] = budget_markdown(pd.concat([pilot, runs_all]) if pilot is not None else runs_all, machine)
    return out


def summary_markdown(fragments: dict[str, str]) -> str:
    """All blocks as one document (``summary.md``), in a fixed order."""
    titles = {
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
    return "\n".join(f"#### {titles[k]}\n\n{fragments[k]}" for k in titles if k in fragments)
