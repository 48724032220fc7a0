"""The committed CSVs -> every number the docs state about the testbed v2 study.

:func:`report` reads only ``docs/study_cpu/testbed2/*.csv`` (written by ``recipe.study.common.collect``)
and returns the markdown fragments that ``docs/STUDY_CPU.md`` and ``docs/STUDY_PLAN.md`` include
between ``<!-- generated: ... -->`` markers; ``tests/recipe/study/test_study_docs.py`` re-derives them
from the CSVs and compares. Nothing here reads a run folder. The analysis every study shares (paired
comparisons, Holm, the two-level bootstrap, the criteria, the power) is
``recipe.study.common.analysis`` on v2's ``PLAN``; what is v2's own is its text, its per-task tables and
its exploration.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from recipe.study.census import census_markdown, read_census
from recipe.study.common import analysis as a
from recipe.study.common.reporting import Comparison, interval, p_is, pct, read
from recipe.study.testbed2.plan import PLAN

TITLES = {
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


def criteria_markdown(runs: pd.DataFrame, blocks: pd.DataFrame) -> str:
    crit = a.criteria(PLAN, runs, blocks)
    g = crit["gain"]
    lines = [
        f"- GRPO's validation accuracy gain (final - step 0, mean@k, {g.n} seeds): "
        f"{interval(g.mean, g.low, g.high)} points (95% t-interval); target >= {pct(PLAN.gain_target)} with the "
        f"interval above +{pct(PLAN.gain_floor)}: **{a.met(crit['gain_ok'])}**.",
        f"- Regime (GRPO, mean over seeds per block of {PLAN.block_steps} steps, lowest block): zero-variance groups "
        f"{pct(crit['regime']['all']['zero_variance'])}% (target >= {pct(PLAN.zero_variance_min)}); per task, all-correct / "
        f"all-wrong: "
        + "; ".join(
            f"{t} {pct(crit['regime'][t]['all_correct'])}% / {pct(crit['regime'][t]['all_wrong'])}%"
            for t in PLAN.tasks
        )
        + f" (targets >= {pct(PLAN.all_correct_min)} each): **{a.met(crit['regime_ok'])}**.",
        "",
        "| method | task | zero variance (%) | all correct (%) | all wrong (%) |",
        "|---|---|---|---|---|",
    ]
    for method in PLAN.methods:
        per_block = a.regime(blocks, method)
        for task in (*PLAN.tasks, "all"):
            b = per_block.loc[task]
            cells = [f"{pct(b[k].mean())} (min {pct(b[k].min())})" for k in a.SHARES]
            lines.append(f"| {method} | {task} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Shares of the groups each step generated (for dapo_filter: before filtering), mean over the {PLAN.block_steps}-step "
        "blocks and seeds (min: the lowest block).",
    ]
    return "\n".join(lines) + "\n"


def methods_markdown(runs: pd.DataFrame) -> str:
    lines = [
        "| method | seeds | lr | AUC (%) | final (%) | gain (points) | AUC add (%) | AUC max (%) | final add (%) | final max (%) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in PLAN.methods:
        r = runs[runs.method == method]
        if r.empty:
            continue

        def ci(values: Sequence[float], signed: bool = False) -> str:
            return a.seed_interval(PLAN, values, signed)

        lines.append(
            f"| {method} | {len(r)} | {r.lr.iloc[0]:g} | {ci(r.auc)} | {ci(r.final)} | {ci(r.final - r.start, True)} | "
            f"{ci(r.auc_add)} | {ci(r.auc_max)} | {ci(r.final_add)} | {ci(r.final_max)} |"
        )
    lines += [
        "",
        "Mean over seeds [95% t-interval]; validation mean@k at the training temperature; AUC: mean accuracy over training (trapezoid).",
    ]
    return "\n".join(lines) + "\n"


def per_task_markdown(runs: pd.DataFrame) -> str:
    lines = [
        "| comparison | task | AUC difference (points) | final difference (points) |",
        "|---|---|---|---|",
    ]
    for treatment, control in (PLAN.primary, *PLAN.secondary):
        for task in PLAN.tasks:
            auc = a.paired_t(PLAN, runs, treatment, control, f"auc_{task}")
            final = a.paired_t(PLAN, runs, treatment, control, f"final_{task}")
            lines.append(
                f"| {treatment} - {control} | {task} | {interval(auc.mean, auc.low, auc.high)} | "
                f"{interval(final.mean, final.low, final.high)} |"
            )
    lines += ["", "Mean paired difference [95% t-interval], not corrected for multiplicity (descriptive)."]
    return "\n".join(lines) + "\n"


def budget_markdown(runs: pd.DataFrame, machine: pd.DataFrame | None) -> str:
    lines = a.phase_budget_lines(runs)
    confirmatory = runs[runs.phase == "confirmatory"]
    if len(confirmatory):
        lines += ["", "| method | CPU per run (s) | generated / useful responses |", "|---|---|---|"]
        for method in PLAN.methods:
            r = confirmatory[confirmatory.method == method]
            if len(r):
                lines.append(
                    f"| {method} | {r.cpu_s.mean():.0f} | {r.generated_samples.sum() / r.useful_samples.sum():.2f} |"
                )
    lines += ["", a.total_line(runs, "testbed build and census")]
    if machine is not None and len(machine):
        lines += [
            "",
            f"Wall is the sum of the runs' times (two ran at a time, one thread each); this machine's fp32 matmul speed at "
            f"the model's shapes (recipe/cpu_backend/roofline.py, one thread) was {machine.gflops.min():.1f}-"
            f"{machine.gflops.max():.1f} GFLOP/s over the study ({len(machine)} measurements).",
        ]
    return "\n".join(lines) + "\n"


def tuning_markdown(tuning: pd.DataFrame, chosen: dict[str, float]) -> str:
    lrs = sorted(set(tuning.lr))
    lines = [
        "| method | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen |",
        "|---" * (len(lrs) + 2) + "|",
    ]
    for method in PLAN.methods:
        r = tuning[tuning.method == method]
        cells = []
        for lr in lrs:
            sel = r[r.lr == lr]
            cells.append(f"{pct(sel.auc.mean())} (final {pct(sel.final.mean())})" if len(sel) else "n/a")
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {chosen[method]:g} |")
    seeds = ", ".join(map(str, sorted(set(tuning.seed))))
    lines += ["", f"AUC (%) of validation mean@k, mean over tuning seeds {seeds} (final: last validation)."]
    return "\n".join(lines) + "\n"


def oneline_markdown(runs: pd.DataFrame, comps: Sequence[Comparison], blocks: pd.DataFrame) -> str:
    """The study's result in one line (docs/STUDY_CPU.md and README)."""
    t = comps[0].test
    g = a.criteria(PLAN, runs, blocks)["gain"]
    return (
        f"> **Result in one line.** {len(set(runs.seed))} seeds x {len(PLAN.methods)} methods x {int(runs.steps.iloc[0])} "
        f"steps, pre-registered (docs/STUDY_PLAN.md): COPO `soft_with_zero` - GRPO, area under the validation curve: "
        f"{interval(t.mean, t.low, t.high)} points ({p_is(t.p)}): **{a.verdict(PLAN, comps[0], secondary=False)}**. "
        f"GRPO gained {interval(g.mean, g.low, g.high)} points of validation accuracy; secondary: "
        f"{a.secondary_line(comps)}.\n"
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
        (tuning.method == PLAN.baseline) & (tuning.lr == a.choose_learning_rates(PLAN, tuning)[PLAN.baseline])
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
        f"{pct(PLAN.gain_target)} points on average with the interval above +{pct(PLAN.gain_floor)}), so the "
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
        tuning, chosen, at_chosen = a.tuning_at_chosen(PLAN, pilot)
        out["tuning"] = tuning_markdown(tuning, chosen)
        out["pilot"] = a.mde_markdown(PLAN, at_chosen)
    explored = read(docs, "exploration_runs.csv")
    if explored is not None:
        out["exploration"] = exploration_markdown(explored)
        if runs_all is None and pilot is not None:
            out["oneline"] = status_markdown(pilot, explored)
            out["readme"] = out["oneline"].replace("> **Result in one line.** ", "")
            out["budget"] = budget_markdown(pd.concat([pilot, explored]), read(docs, "machine.csv"))
    c = a.confirmatory(PLAN, docs)
    if c is None:
        return out
    out["criteria"] = criteria_markdown(c.runs, c.blocks)
    out["methods"] = methods_markdown(c.runs)
    out["per_task"] = per_task_markdown(c.runs)
    out.update(a.confirmatory_fragments(PLAN, c, oneline_markdown(c.runs, c.comps, c.blocks)))
    if pilot is not None:
        out["pilot"] = a.mde_markdown(PLAN, at_chosen, c.runs)
    out["budget"] = budget_markdown(
        pd.concat([pilot, c.runs_all]) if pilot is not None else c.runs_all, read(docs, "machine.csv")
    )
    return out


def summary_markdown(fragments: dict[str, str]) -> str:
    """All fragments as one document (``summary.md``), in a fixed order."""
    return a.summary_markdown(TITLES, fragments)
