"""The committed CSVs -> every number the docs state about the testbed v2 study.

:func:`report` reads only ``docs/study_cpu/testbed2/*.csv`` (written by :mod:`collect`) and returns
the tables and the markdown fragments that ``docs/STUDY_CPU.md`` and ``docs/STUDY_PLAN.md`` include
between ``<!-- generated: ... -->`` markers; ``tests/recipe/study/test_study_docs.py`` re-derives them
from the CSVs and compares. Nothing here reads a run folder.

Statistics (``recipe.stats``): paired t-intervals and two-sided p-values over seeds, Holm's
correction over the secondary family, a two-level (seeds x problems) percentile bootstrap of the
primary endpoint's mean difference, and the minimum detectable effect of a paired t-test.
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
from recipe.study.census import census_markdown, read_census
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
from recipe.study.testbed2 import plan

TASKS = ("add", "max")


def _paired(runs: pd.DataFrame, treatment: str, control: str, column: str) -> paired.PairedT:
    t = runs[runs.method == treatment].set_index("seed")[column]
    c = runs[runs.method == control].set_index("seed")[column]
    seeds = sorted(set(t.index) & set(c.index))
    if len(seeds) < 2:
        raise ValueError(f"{treatment} vs {control}: {len(seeds)} paired seeds")
    return paired.paired_t([float(t[s] - c[s]) for s in seeds], plan.ALPHA)


def bootstrap(
    problems: pd.DataFrame, meta: dict[str, int], runs: pd.DataFrame, treatment: str, control: str
) -> tuple[float, float, float]:
    """Two-level bootstrap of the mean per-problem AUC difference (seeds x problems)."""
    seeds = sorted(set(runs[runs.method == treatment].seed) & set(runs[runs.method == control].seed))
    diff = np.stack(
        [
            problem_auc(problems, meta, f"{treatment}-s{s}") - problem_auc(problems, meta, f"{control}-s{s}")
            for s in seeds
        ]
    )
    return paired.two_level_bootstrap(diff, 1 - plan.ALPHA, RESAMPLES, seed=0)


def comparisons(
    runs: pd.DataFrame, problems: pd.DataFrame | None, meta: dict[str, int] | None
) -> list[Comparison]:
    """The primary comparison, then the secondary family with Holm-adjusted p (endpoint: AUC)."""
    out = []
    for treatment, control in (plan.PRIMARY, *plan.SECONDARY):
        boot = bootstrap(problems, meta, runs, treatment, control) if problems is not None and meta else None
        out.append(Comparison(treatment, control, "auc", _paired(runs, treatment, control, "auc"), boot=boot))
    adjusted = paired.holm([c.test.p for c in out[1:]])
    for c, p in zip(out[1:], adjusted, strict=True):
        c.holm_p = p
    return out


def verdict(c: Comparison, secondary: bool) -> str:
    p = c.holm_p if secondary else c.test.p
    if p is None or p > plan.ALPHA:
        return "no significant difference"
    return f"{c.treatment} {'higher' if c.test.mean > 0 else 'lower'}"


def criteria(runs: pd.DataFrame, blocks: pd.DataFrame, method: str = plan.BASELINE) -> dict[str, Any]:
    """The testbed's learning and regime criteria for ``method`` (docs/STUDY_PLAN.md, testbed)."""
    mine = runs[runs.method == method]
    gain = paired.paired_t((mine.final - mine.start).tolist(), plan.ALPHA)
    per_block = (
        blocks[blocks.method == method]
        .groupby(["task", "first_step"])[["zero_variance", "all_correct", "all_wrong"]]
        .mean()
    )
    regime = {}
    for task in (*TASKS, "all"):
        b = per_block.loc[task]
        regime[task] = {k: float(b[k].min()) for k in ("zero_variance", "all_correct", "all_wrong")}
    tasks_ok = all(
        regime[t]["all_correct"] >= plan.ALL_CORRECT_MIN and regime[t]["all_wrong"] >= plan.ALL_WRONG_MIN
        for t in TASKS
    )
    return {
        "gain": gain,
        "gain_ok": gain.mean >= plan.GAIN_TARGET and gain.low > plan.GAIN_FLOOR,
        "regime": regime,
        "regime_ok": regime["all"]["zero_variance"] >= plan.ZERO_VARIANCE_MIN and tasks_ok,
    }


def _yes(ok: bool) -> str:
    return "met" if ok else "NOT met"


def criteria_markdown(runs: pd.DataFrame, blocks: pd.DataFrame) -> str:
    crit = criteria(runs, blocks)
    g = crit["gain"]
    lines = [
        f"- GRPO's validation accuracy gain (final - step 0, mean@k, {g.n} seeds): "
        f"{interval(g.mean, g.low, g.high)} points (95% t-interval); target >= {pct(plan.GAIN_TARGET)} with the "
        f"interval above +{pct(plan.GAIN_FLOOR)}: **{_yes(crit['gain_ok'])}**.",
        f"- Regime (GRPO, mean over seeds per block of {plan.BLOCK_STEPS} steps, lowest block): zero-variance groups "
        f"{pct(crit['regime']['all']['zero_variance'])}% (target >= {pct(plan.ZERO_VARIANCE_MIN)}); per task, all-correct / "
        f"all-wrong: "
        + "; ".join(
            f"{t} {pct(crit['regime'][t]['all_correct'])}% / {pct(crit['regime'][t]['all_wrong'])}%"
            for t in TASKS
        )
        + f" (targets >= {pct(plan.ALL_CORRECT_MIN)} each): **{_yes(crit['regime_ok'])}**.",
        "",
        "| method | task | zero variance (%) | all correct (%) | all wrong (%) |",
        "|---|---|---|---|---|",
    ]
    for method in plan.METHODS:
        per_block = (
            blocks[blocks.method == method]
            .groupby(["task", "first_step"])[["zero_variance", "all_correct", "all_wrong"]]
            .mean()
        )
        for task in (*TASKS, "all"):
            b = per_block.loc[task]
            cells = [
                f"{pct(b[k].mean())} (min {pct(b[k].min())})"
                for k in ("zero_variance", "all_correct", "all_wrong")
            ]
            lines.append(f"| {method} | {task} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Shares of the groups each step generated (for dapo_filter: before filtering), mean over the {plan.BLOCK_STEPS}-step "
        "blocks and seeds (min: the lowest block).",
    ]
    return "\n".join(lines) + "\n"


def methods_markdown(runs: pd.DataFrame) -> str:
    lines = [
        "| method | seeds | lr | AUC (%) | final (%) | gain (points) | AUC add (%) | AUC max (%) | final add (%) | final max (%) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in plan.METHODS:
        r = runs[runs.method == method]
        if r.empty:
            continue

        def ci(values: Sequence[float], signed: bool = False) -> str:
            t = paired.paired_t(list(values), plan.ALPHA)
            return interval(t.mean, t.low, t.high, signed)

        lines.append(
            f"| {method} | {len(r)} | {r.lr.iloc[0]:g} | {ci(r.auc)} | {ci(r.final)} | {ci(r.final - r.start, True)} | "
            f"{ci(r.auc_add)} | {ci(r.auc_max)} | {ci(r.final_add)} | {ci(r.final_max)} |"
        )
    lines += [
        "",
        "Mean over seeds [95% t-interval]; validation mean@k at the training temperature; AUC: mean accuracy over training (trapezoid).",
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


def per_task_markdown(runs: pd.DataFrame) -> str:
    lines = [
        "| comparison | task | AUC difference (points) | final difference (points) |",
        "|---|---|---|---|",
    ]
    for treatment, control in (plan.PRIMARY, *plan.SECONDARY):
        for task in TASKS:
            auc = _paired(runs, treatment, control, f"auc_{task}")
            final = _paired(runs, treatment, control, f"final_{task}")
            lines.append(
                f"| {treatment} - {control} | {task} | {interval(auc.mean, auc.low, auc.high)} | "
                f"{interval(final.mean, final.low, final.high)} |"
            )
    lines += ["", "Mean paired difference [95% t-interval], not corrected for multiplicity (descriptive)."]
    return "\n".join(lines) + "\n"


def budget_markdown(runs: pd.DataFrame, machine: pd.DataFrame | None) -> str:
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
    confirmatory = runs[runs.phase == "confirmatory"]
    if len(confirmatory):
        lines += ["", "| method | CPU per run (s) | generated / useful responses |", "|---|---|---|"]
        for method in plan.METHODS:
            r = confirmatory[confirmatory.method == method]
            if len(r):
                lines.append(
                    f"| {method} | {r.cpu_s.mean():.0f} | {r.generated_samples.sum() / r.useful_samples.sum():.2f} |"
                )
    lines += [
        "",
        f"In all: {len(runs)} runs, {runs.wall_s.sum() / 3600:.2f} h of run wall time and "
        f"{runs.cpu_s.sum() / 3600:.2f} h of CPU time (testbed build and census not included).",
    ]
    if machine is not None and len(machine):
        lines += [
            "",
            f"Wall is the sum of the runs' times (two ran at a time, one thread each); this machine's fp32 matmul speed at "
            f"the model's shapes (recipe/cpu_backend/roofline.py, one thread) was {machine.gflops.min():.1f}-"
            f"{machine.gflops.max():.1f} GFLOP/s over the study ({len(machine)} measurements).",
        ]
    return "\n".join(lines) + "\n"


def mde_markdown(pilot: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """The minimum detectable effect of the primary comparison from the pilot (and, once run, the study)."""
    test = _paired(pilot, *plan.PRIMARY, "auc")
    n = len(plan.CONFIRMATORY_SEEDS)
    mde = paired.minimum_detectable_effect(test.sd, n, plan.ALPHA, plan.POWER)
    line = (
        f"Pilot ({test.n} paired seeds, {', '.join(map(str, sorted(set(pilot.seed))))}): SD of the paired AUC difference "
        f"{100 * test.sd:.2f} points, so with {n} seeds a two-sided paired t-test at alpha {plan.ALPHA} detects a mean "
        f"difference of **{100 * mde:.2f} points** with {plan.POWER:.0%} power (the pilot's own mean difference: "
        f"{100 * test.mean:+.2f})."
    )
    if runs is not None:
        achieved = _paired(runs, *plan.PRIMARY, "auc")
        achieved_mde = paired.minimum_detectable_effect(achieved.sd, achieved.n, plan.ALPHA, plan.POWER)
        line += (
            f" In the confirmatory runs the SD was {100 * achieved.sd:.2f} points: {100 * achieved_mde:.2f} points at "
            f"{plan.POWER:.0%} power."
        )
    return line + "\n"


def tuning_markdown(tuning: pd.DataFrame, chosen: dict[str, float]) -> str:
    lrs = sorted(set(tuning.lr))
    lines = [
        "| method | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen |",
        "|---" * (len(lrs) + 2) + "|",
    ]
    for method in plan.METHODS:
        r = tuning[tuning.method == method]
        cells = []
        for lr in lrs:
            sel = r[r.lr == lr]
            cells.append(f"{pct(sel.auc.mean())} (final {pct(sel.final.mean())})" if len(sel) else "n/a")
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {chosen[method]:g} |")
    seeds = ", ".join(map(str, sorted(set(tuning.seed))))
    lines += ["", f"AUC (%) of validation mean@k, mean over tuning seeds {seeds} (final: last validation)."]
    return "\n".join(lines) + "\n"


def choose_learning_rates(tuning: pd.DataFrame) -> dict[str, float]:
    """Per method, the grid learning rate with the highest mean AUC over the tuning seeds (ties: the smaller)."""
    out = {}
    for method in plan.METHODS:
        means = tuning[tuning.method == method].groupby("lr").auc.mean()
        best = means.max()
        out[method] = float(min(lr for lr, v in means.items() if v == best))
    return out


def real_trainer_markdown(real: pd.DataFrame, fast: pd.DataFrame) -> str:
    treatment, control = plan.REAL_TRAINER_METHODS
    lines = [
        "| trainer | seeds | start (%) | "
        + f"final {control} (%) | final {treatment} (%) | {treatment} - {control}, final (points) |",
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
    """The study's result in one line (docs/STUDY_CPU.md and README)."""
    primary = comps[0]
    t = primary.test
    crit = criteria(runs, blocks)
    seeds = len(set(runs.seed))
    steps = int(runs.steps.iloc[0])
    secondary = "; ".join(
        f"{c.name} {interval(c.test.mean, c.test.low, c.test.high)} ({p_is(c.holm_p or 1.0, 'Holm p')})"
        for c in comps[1:]
    )
    g = crit["gain"]
    return (
        f"> **Result in one line.** {seeds} seeds x {len(plan.METHODS)} methods x {steps} steps, pre-registered "
        f"(docs/STUDY_PLAN.md): COPO `soft_with_zero` - GRPO, area under the validation curve: "
        f"{interval(t.mean, t.low, t.high)} points ({p_is(t.p)}): **{verdict(primary, secondary=False)}**. "
        f"GRPO gained {interval(g.mean, g.low, g.high)} points of validation accuracy; secondary: {secondary}.\n"
    )


def exploration_markdown(explored: pd.DataFrame) -> str:
    """The probes that tried to make testbed v2 learn (``exploration.py``), and the stopped seed-0 runs."""
    from recipe.study.testbed2.exploration import PROBES

    what = {p.name: p.what for p in PROBES}
    lines = [
        "| run | what changed (GRPO unless named) | seed | steps | step 0: all / add / max (%) | last: all / add / max (%) | gain, all (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in explored.iterrows():
        label = what.get(r.run, f"v2's confirmatory study, stopped after seed 0 ({r.method}, lr {r.lr:g})")

        def trio(prefix: str, r: Any = r) -> str:
            return " / ".join(pct(r[f"{prefix}{suffix}"]) for suffix in ("", "_add", "_max"))

        lines.append(
            f"| {r.run} | {label} | {r.seed} | {r.steps} | {trio('start')} | {trio('final')} | {pct(r.final - r.start, True)} |"
        )
    lines += [
        "",
        "Validation mean@4 at T = 1 on each probe's own validation set (the `max_only` set has no add problems).",
    ]
    return "\n".join(lines) + "\n"


def status_markdown(pilot: pd.DataFrame, explored: pd.DataFrame) -> str:
    """The study's result in one line when its confirmatory phase did not run."""
    from recipe.study.testbed2.exploration import PROBES

    tuning = pilot[pilot.phase == "tuning"]
    grpo = tuning[
        (tuning.method == plan.BASELINE) & (tuning.lr == choose_learning_rates(tuning)[plan.BASELINE])
    ]
    held_out = {p.name for p in PROBES if p.data != "small16"}  # small16 validates on its training prompts
    probes = explored[explored.run.isin(held_out)]
    kinds = {p.name: p.data for p in PROBES}
    mixed = probes[probes.run.map(kinds) != "max_only"]
    best = mixed.loc[(mixed.final - mixed.start).idxmax()]
    max_only = probes[probes.run.map(kinds) == "max_only"]
    max_gains = (max_only.final - max_only.start).tolist()
    with_add = probes.dropna(subset=["final_add"])
    best_add = (with_add.final_add - with_add.start_add).max()
    rates = sorted({*tuning.lr, *probes.lr})
    return (
        "> **Result in one line.** Not run: on testbed v2 GRPO's validation accuracy moved "
        f"{pct((grpo.final - grpo.start).mean(), True)} points in {int(grpo.steps.iloc[0])} steps (tuning seeds, "
        f"its tuned rate), and {len(probes)} exploratory GRPO probes on held-out problems ({int(probes.steps.min())}-"
        f"{int(probes.steps.max())} steps; G = 8, 32 prompts a step, learning rates {rates[0]:g} to {rates[-1]:g} with "
        "warm-up and clipping, problems re-split toward the levels the policy half-solves, the max task alone) raised "
        f"it by at most {pct(best.final - best.start, True)} points on both tasks ({best.run}; the add task at most "
        f"{pct(best_add, True)} in any probe); the max task alone, {int(max_only.steps.max())} steps, gained "
        + " and ".join(pct(g, True) for g in max_gains)
        + f" on {len(max_gains)} seeds (mean {pct(sum(max_gains) / len(max_gains), True)}). No design met the pre-registered learning criterion (>= "
        f"{pct(plan.GAIN_TARGET)} points on average with the interval above +{pct(plan.GAIN_FLOOR)}), so the "
        "confirmatory study was stopped after its first seed and COPO is not ranked against GRPO here.\n"
    )


def report(docs: Path) -> dict[str, str]:
    """Markdown fragments from the CSVs in ``docs`` (keys: the fragment names the docs include)."""
    runs_all = read(docs, "runs.csv")
    pilot = read(docs, "pilot_runs.csv")
    out: dict[str, str] = {}
    for name in ("census", "census_question_only"):
        if (docs / f"{name}.csv").is_file():
            out[name] = census_markdown(read_census(docs / f"{name}.csv"))
    if pilot is not None:
        tuning = pilot[pilot.phase == "tuning"]
        chosen = choose_learning_rates(tuning)
        at_chosen = pilot[pilot.apply(lambda r: math.isclose(r.lr, chosen[r.method]), axis=1)]
        out["tuning"] = tuning_markdown(tuning, chosen)
        out["pilot"] = mde_markdown(at_chosen)
    explored = read(docs, "exploration_runs.csv")
    if explored is not None:
        out["exploration"] = exploration_markdown(explored)
        if runs_all is None and pilot is not None:
            out["oneline"] = status_markdown(pilot, explored)
            out["readme"] = out["oneline"].replace("> **Result in one line.** ", "")
            out["budget"] = budget_markdown(pd.concat([pilot, explored]), read(docs, "machine.csv"))
    if runs_all is None:
        return out
    runs = runs_all[runs_all.phase == "confirmatory"]
    problems = read(docs, "problems.csv")
    meta = json.loads((docs / "problems.json").read_text()) if (docs / "problems.json").is_file() else None
    blocks = read(docs, "blocks.csv")
    comps = comparisons(runs, problems, meta)
    out["criteria"] = criteria_markdown(runs, blocks[blocks.phase == "confirmatory"])
    out["methods"] = methods_markdown(runs)
    out["comparisons"] = comparisons_markdown(comps)
    out["per_task"] = per_task_markdown(runs)
    out["oneline"] = oneline_markdown(runs, comps, blocks[blocks.phase == "confirmatory"])
    out["readme"] = out["oneline"].replace("> **Result in one line.** ", "Measured here: ")
    if pilot is not None:
        out["pilot"] = mde_markdown(at_chosen, runs)
    real = runs_all[runs_all.phase == "real"]
    if len(real):
        out["real_trainer"] = real_trainer_markdown(real, runs)
    out["budget"] = budget_markdown(
        pd.concat([pilot, runs_all]) if pilot is not None else runs_all, read(docs, "machine.csv")
    )
    return out


def summary_markdown(fragments: dict[str, str]) -> str:
    """All fragments as one document (``summary.md``), in a fixed order."""
    titles = {
        "oneline": "Result",
        "census": "Step-0 census (SFT policy, G and temperature of training)",
        "criteria": "Testbed criteria",
        "comparisons": "Comparisons (primary endpoint)",
        "methods": "Methods",
        "per_task": "Per task",
        "pilot": "Power",
        "tuning": "Learning-rate tuning",
        "exploration": "Trying to make the testbed learn",
        "real_trainer": "Confirmation through verl's trainer",
        "budget": "Machine time",
    }
    parts = [f"#### {titles[k]}\n\n{fragments[k]}" for k in titles if k in fragments]
    return "\n".join(parts)
