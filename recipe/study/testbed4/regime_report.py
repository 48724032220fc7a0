"""One regime's tuning, pilot and confirmatory runs, from its committed CSVs (``docs/study_cpu/testbed4/<regime>/``):
the docs' ``testbed4_<regime>/*`` blocks that ``study_testbed4.py <regime> pilot-summarize`` and ``summarize`` write.

From ``runs.csv`` (the confirmatory runs; ``summarize``): ``comparisons`` (the primary, and the variant's two
comparisons with Holm within the regime), ``methods``, ``criteria`` (GRPO's learning criterion), ``mechanism``
and ``real_trainer`` (once run). From ``pilot_runs.csv`` (``pilot-summarize``):

- ``tuning``: per method and learning rate run (the grid and its extensions beyond an edge), the AUC of
  validation mean@4 and the final accuracy on the tuning seed, and the chosen rate;
- ``tuning_criteria``: the testbed's learning criterion, GRPO at its tuned rate on the tuning and pilot seeds;
- ``pilot``: the smallest detectable effect of the primary comparison (``analysis.mde_markdown``);
- ``pilot_methods``: every method at its tuned rate on the tuning and pilot seeds, with its paired AUC
  difference against GRPO, descriptive (no test: ``plan.descriptive`` for the methods not confirmatory).

Compute-matched DAPO is read on the sample axis by the collection (``recipe.study.common.sample_axis``):
its validations stand at the steps whose generated samples they first reached, so its AUC and final
accuracy are on the other methods' axis; its rows keep the steps it trained and the samples it generated.
Nothing here reads a run folder.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recipe.study.common import analysis as a
from recipe.study.common.plan import StudyPlan
from recipe.study.common.reporting import interval, pct, read

TITLES = {
    "comparisons": "Comparisons (primary endpoint, confirmatory seeds)",
    "methods": "Confirmatory methods",
    "criteria": "Learning criterion on the confirmatory seeds",
    "mechanism": "Mechanism: the advantage of wrong answers",
    "tuning": "Learning-rate tuning",
    "tuning_criteria": "Learning criterion on the tuning and pilot seeds",
    "pilot": "Smallest detectable effect",
    "pilot_methods": "Every method at its tuned rate (tuning and pilot seeds, descriptive)",
    "real_trainer": "Confirmation through verl's trainer",
}


def tuning_markdown(plan: StudyPlan, tuning: pd.DataFrame, chosen: dict[str, float]) -> str:
    lrs = sorted(set(tuning.lr))
    lines = [
        "| method | " + " | ".join(f"lr {lr:g}: AUC (final)" for lr in lrs) + " | chosen | inside the rates run |",
        "|---" * (len(lrs) + 3) + "|",
    ]
    for method in plan.methods:
        r = tuning[tuning.method == method]
        cells = []
        for lr in lrs:
            s = r[r.lr == lr]
            cells.append(f"{pct(s.auc.mean())} ({pct(s.final.mean())})" if len(s) else "-")
        mine = sorted(set(r.lr))
        inside = "yes" if mine[0] < chosen[method] < mine[-1] else "no"
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {chosen[method]:g} | {inside} |")
    steps = sorted({int(s) for v in tuning.val_steps for s in str(v).split()})
    seeds = ", ".join(map(str, sorted(set(tuning.seed))))
    lines += [
        "",
        f"Validation mean@4 (%) over the regime's validation problems, tuning seed {seeds}: AUC (trapezoid over "
        f"steps {', '.join(map(str, steps))}, divided by {steps[-1]}) and, in brackets, the final accuracy; "
        f"-: not run. Rule: {plan.rate_rule}.",
    ]
    matched = tuning[tuning.method.isin(plan.sample_matched)]
    if len(matched):
        lines[-1] += (
            f" {', '.join(plan.sample_matched)} (compute-matched) is read at the other methods' generated samples: "
            f"its runs trained {int(matched.steps.min())}-{int(matched.steps.max())} steps and generated "
            f"{int(matched.generated_samples.min()):,}-{int(matched.generated_samples.max()):,} samples."
        )
    return "\n".join(lines) + "\n"


def criteria_markdown(plan: StudyPlan, at_chosen: pd.DataFrame) -> str:
    grpo = at_chosen[at_chosen.method == plan.baseline]
    gain, ok = a.learning_criterion(plan, grpo)
    return (
        f"- GRPO's validation accuracy gain (tuning and pilot seeds at its tuned rate {grpo.lr.iloc[0]:g}; final - "
        f"step 0, mean@4, {gain.n} seeds): {interval(gain.mean, gain.low, gain.high)} points (95% t-interval); "
        f"target >= {pct(plan.gain_target)} with the interval above {pct(plan.gain_floor, True)}: "
        f"**{a.met(ok)}**.\n"
    )


def pilot_methods_markdown(plan: StudyPlan, at_chosen: pd.DataFrame) -> str:
    base = at_chosen[at_chosen.method == plan.baseline].set_index("seed")
    lines = [
        f"| method | role | lr | seeds | AUC (%) | final (%) | gain (points) | AUC - {plan.baseline}, per seed (points) | "
        f"mean (points) | generated samples per run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    described = {t for t, _ in plan.descriptive}
    for method in plan.pilot_methods:
        r = at_chosen[at_chosen.method == method].set_index("seed").sort_index()
        if r.empty:
            continue
        role = "confirmatory" if method in plan.confirmatory_methods else "descriptive"
        if method == plan.baseline:
            diffs, mean = "", ""
        else:
            seeds = [s for s in r.index if s in base.index]
            d = [float(r.auc[s] - base.auc[s]) for s in seeds]
            diffs = ", ".join(f"{pct(x, True)} ({s})" for x, s in zip(d, seeds, strict=True))
            mean = pct(sum(d) / len(d), True) if d else "n/a"
            if method in described:
                mean = f"**{mean}**"
        lines.append(
            f"| {method} | {role} | {r.lr.iloc[0]:g} | {len(r)} | {pct(r.auc.mean())} | {pct(r.final.mean())} | "
            f"{pct((r.final - r.start).mean(), True)} | {diffs} | {mean} | {int(r.generated_samples.mean()):,} |"
        )
    names = ", ".join(f"`{t}` - `{c}`" for t, c in plan.descriptive)
    lines += [
        "",
        f"Means over the seeds {', '.join(map(str, sorted(set(at_chosen.seed))))} (the tuning seed at the chosen rate and "
        f"the pilot seeds); differences paired by seed. Descriptive only, no test: {names} (in bold) are stated "
        "here and nowhere tested; the confirmatory methods' comparisons are tested on the confirmatory seeds.",
    ]
    return "\n".join(lines) + "\n"


def methods_markdown(plan: StudyPlan, runs: pd.DataFrame) -> str:
    lines = [
        "| method | seeds | lr | AUC (%) | start (%) | final (%) | gain (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in plan.confirmatory_methods:
        r = runs[runs.method == method]
        if len(r) < 2:
            continue
        lines.append(
            f"| {method} | {len(r)} | {r.lr.iloc[0]:g} | {a.seed_interval(plan, r.auc)} | {pct(r.start.mean())} | "
            f"{a.seed_interval(plan, r.final)} | {a.seed_interval(plan, r.final - r.start, True)} |"
        )
    lines += [
        "",
        "Mean over the confirmatory seeds [95% t-interval]; validation mean@4 over the regime's validation problems; "
        "AUC: trapezoid over the validation steps, divided by the budget's steps.",
    ]
    return "\n".join(lines) + "\n"


def confirmatory_fragments(plan: StudyPlan, docs: Path) -> dict[str, str]:
    """The regime's confirmatory blocks (nothing before its ``runs.csv``)."""
    from recipe.study.common.mechanism import mechanism_markdown

    c = a.confirmatory(plan, docs)
    if c is None or c.runs.empty:
        return {}
    grpo = c.runs[c.runs.method == plan.baseline]
    gain, ok = a.learning_criterion(plan, grpo)
    out = {
        "comparisons": a.comparisons_markdown(plan, c.comps),
        "methods": methods_markdown(plan, c.runs),
        "criteria": (
            f"- GRPO's validation accuracy gain (confirmatory seeds; final - step 0, mean@4, {gain.n} seeds): "
            f"{interval(gain.mean, gain.low, gain.high)} points (95% t-interval); target >= {pct(plan.gain_target)} "
            f"with the interval above {pct(plan.gain_floor, True)}: **{a.met(ok)}**.\n"
        ),
    }
    mechanism = read(docs, "mechanism.csv")
    if mechanism is not None:
        out["mechanism"] = mechanism_markdown(plan, mechanism)
    if len(c.real):
        out["real_trainer"] = a.real_trainer_markdown(plan, c.real, c.runs)
    return out


def report(plan: StudyPlan, docs: Path) -> dict[str, str]:
    """The regime's blocks from ``docs``: ``tuning`` / ``pilot`` from ``pilot_runs.csv``, the confirmatory
    ones from ``runs.csv`` (each left out before its phase has run)."""
    out = confirmatory_fragments(plan, docs)
    pilot = read(docs, "pilot_runs.csv")
    if pilot is None:
        return out
    tuning, chosen, at_chosen = a.tuning_at_chosen(plan, pilot)
    out["tuning"] = tuning_markdown(plan, tuning, chosen)
    if (at_chosen.method == plan.baseline).sum() >= 2:
        out["tuning_criteria"] = criteria_markdown(plan, at_chosen)
    paired = at_chosen[at_chosen.method.isin(plan.primary)].groupby("seed").method.nunique()
    if (paired == len(plan.primary)).sum() >= 2:  # the pilot has run
        out["pilot"] = a.mde_markdown(plan, at_chosen)
        out["pilot_methods"] = pilot_methods_markdown(plan, at_chosen)
    return out


def summary_markdown(fragments: dict[str, str]) -> str:
    return a.summary_markdown(TITLES, fragments)
