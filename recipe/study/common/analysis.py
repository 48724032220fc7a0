"""A testbed study's analysis, from its committed CSVs and its plan (``StudyPlan``): the paired
comparisons of the primary endpoint (AUC) with Holm over the secondary family and the two-level
bootstrap, the testbed's learning and regime criteria, the learning-rate rule, the power, and the
tables every study states alike. A study's report (``recipe.study.testbedN.report``) adds its own text.

Statistics (``recipe.stats``): paired t-intervals and two-sided p-values over seeds, Holm's correction
over the secondary family, a two-level (seeds x problems) percentile bootstrap of the mean per-problem
difference, and the minimum detectable effect of a paired t-test.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from recipe import stats as paired
from recipe.study.common import rates as lr_rule
from recipe.study.common.plan import StudyPlan
from recipe.study.common.reporting import Comparison, interval, p_is, pct, problem_auc, pvalue, read

RESAMPLES = 10_000
SHARES = ("zero_variance", "all_correct", "all_wrong")


def paired_t(
    plan: StudyPlan, runs: pd.DataFrame, treatment: str, control: str, column: str
) -> paired.PairedT:
    """Paired t over the seeds both methods ran: ``column`` of treatment - control."""
    t = runs[runs.method == treatment].set_index("seed")[column]
    c = runs[runs.method == control].set_index("seed")[column]
    seeds = sorted(set(t.index) & set(c.index))
    if len(seeds) < 2:
        raise ValueError(f"{treatment} vs {control}: {len(seeds)} paired seeds")
    return paired.paired_t([float(t[s] - c[s]) for s in seeds], plan.alpha)


def bootstrap(
    plan: StudyPlan,
    problems: pd.DataFrame,
    meta: dict[str, int],
    runs: pd.DataFrame,
    treatment: str,
    control: str,
    resamples: int | None = None,
) -> tuple[float, float, float]:
    """Two-level bootstrap of the mean per-problem AUC difference (seeds x problems)."""
    seeds = sorted(set(runs[runs.method == treatment].seed) & set(runs[runs.method == control].seed))
    diff = np.stack(
        [
            problem_auc(problems, meta, f"{treatment}-s{s}") - problem_auc(problems, meta, f"{control}-s{s}")
            for s in seeds
        ]
    )
    return paired.two_level_bootstrap(diff, 1 - plan.alpha, resamples or RESAMPLES, seed=0)


def comparisons(
    plan: StudyPlan,
    runs: pd.DataFrame,
    problems: pd.DataFrame | None,
    meta: dict[str, int] | None,
    resamples: int | None = None,
) -> list[Comparison]:
    """The primary comparison, then the secondary family with Holm-adjusted p (endpoint: AUC)."""
    out = []
    for treatment, control in (plan.primary, *plan.secondary):
        boot = None
        if problems is not None and meta:
            boot = bootstrap(plan, problems, meta, runs, treatment, control, resamples)
        test = paired_t(plan, runs, treatment, control, "auc")
        out.append(Comparison(treatment, control, "auc", test, boot=boot))
    for c, p in zip(out[1:], paired.holm([c.test.p for c in out[1:]]), strict=True):
        c.holm_p = p
    return out


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values of a family (``recipe.stats.holm``; testbed v4's primary over its regimes)."""
    return paired.holm(list(p_values))


def verdict(plan: StudyPlan, c: Comparison, secondary: bool) -> str:
    p = c.holm_p if secondary else c.test.p
    if p is None or p > plan.alpha:
        return "no significant difference"
    return f"{c.treatment} {'higher' if c.test.mean > 0 else 'lower'}"


def regime(blocks: pd.DataFrame, method: str) -> pd.DataFrame:
    """Per task and block: the shares of zero-variance, all-correct and all-wrong groups, mean over seeds."""
    return blocks[blocks.method == method].groupby(["task", "first_step"])[list(SHARES)].mean()


def learning_criterion(plan: StudyPlan, runs: pd.DataFrame) -> tuple[paired.PairedT, bool]:
    """The validation accuracy gain (final - start) over ``runs`` (one method's seeds), and whether it meets
    the plan's learning criterion (mean >= ``gain_target``, its interval above ``gain_floor``)."""
    gain = paired.paired_t((runs.final - runs.start).tolist(), plan.alpha)
    return gain, gain.mean >= plan.gain_target and gain.low > plan.gain_floor


def criteria(
    plan: StudyPlan, runs: pd.DataFrame, blocks: pd.DataFrame, method: str | None = None
) -> dict[str, Any]:
    """The testbed's learning and regime criteria for ``method`` (the baseline by default)."""
    method = plan.baseline if method is None else method
    gain, gain_ok = learning_criterion(plan, runs[runs.method == method])
    per_block = regime(blocks, method)
    lowest = {task: {k: float(per_block.loc[task][k].min()) for k in SHARES} for task in (*plan.tasks, "all")}
    tasks_ok = all(
        lowest[t]["all_correct"] >= plan.all_correct_min and lowest[t]["all_wrong"] >= plan.all_wrong_min
        for t in plan.tasks
    )
    return {
        "gain": gain,
        "gain_ok": gain_ok,
        "regime": lowest,
        "regime_ok": lowest["all"]["zero_variance"] >= plan.zero_variance_min and tasks_ok,
    }


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def seed_interval(plan: StudyPlan, values: Sequence[float], signed: bool = False) -> str:
    """Mean over seeds [95% t-interval] of ``values``."""
    t = paired.paired_t(list(values), plan.alpha)
    return interval(t.mean, t.low, t.high, signed)


def comparisons_markdown(plan: StudyPlan, comps: Sequence[Comparison]) -> str:
    primary = comps[0]
    t = primary.test
    lines = [
        f"**Primary** ({primary.name}, AUC of validation mean@k, {t.n} paired seeds): "
        f"{interval(t.mean, t.low, t.high)} points (95% t-interval), {p_is(t.p)}"
        + (f"; two-level bootstrap (seeds x problems) {interval(*primary.boot)}" if primary.boot else "")
        + f": **{verdict(plan, primary, secondary=False)}**.",
        "",
        "| comparison | AUC difference (points) [95% t-interval] | p | Holm p | two-level bootstrap [95%] | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for c in comps:
        holm = "(primary)" if c.holm_p is None else pvalue(c.holm_p)
        boot = interval(*c.boot) if c.boot else "n/a"
        lines.append(
            f"| {c.name} | {interval(c.test.mean, c.test.low, c.test.high)} | {pvalue(c.test.p)} | {holm} | {boot} | "
            f"{verdict(plan, c, secondary=c.holm_p is not None)} |"
        )
    return "\n".join(lines) + "\n"


def secondary_line(comps: Sequence[Comparison]) -> str:
    """The secondary family in one line (the one-line results)."""
    return "; ".join(
        f"{c.name} {interval(c.test.mean, c.test.low, c.test.high)} ({p_is(c.holm_p or 1.0, 'Holm p')})"
        for c in comps[1:]
    )


def mde_markdown(plan: StudyPlan, pilot: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """The minimum detectable effect of the primary comparison from the pilot (and, once run, the study)."""
    test = paired_t(plan, pilot, *plan.primary, "auc")
    n = len(plan.confirmatory_seeds)
    mde = paired.minimum_detectable_effect(test.sd, n, plan.alpha, plan.power)
    fewer = ", ".join(
        f"{100 * paired.minimum_detectable_effect(test.sd, k, plan.alpha, plan.power):.2f} with {k}"
        for k in plan.power_seeds
        if k != n
    )
    line = (
        f"Pilot ({test.n} paired seeds, {', '.join(map(str, sorted(set(pilot.seed))))}): SD of the paired AUC difference "
        f"{100 * test.sd:.2f} points, so with {n} seeds a two-sided paired t-test at alpha {plan.alpha} detects a mean "
        f"difference of **{100 * mde:.2f} points** with {plan.power:.0%} power ("
        + (f"{fewer} seeds; " if fewer else "")
        + f"the pilot's own mean difference: {100 * test.mean:+.2f})."
    )
    if runs is not None:
        achieved = paired_t(plan, runs, *plan.primary, "auc")
        achieved_mde = paired.minimum_detectable_effect(achieved.sd, achieved.n, plan.alpha, plan.power)
        line += (
            f" In the confirmatory runs ({achieved.n} paired seeds) the SD was {100 * achieved.sd:.2f} points: "
            f"{100 * achieved_mde:.2f} points at {plan.power:.0%} power."
        )
    return line + "\n"


def choose_learning_rates(plan: StudyPlan, tuning: pd.DataFrame) -> dict[str, float]:
    """Per method, the learning rate run with the highest mean AUC over the tuning seeds (ties: the smaller)."""
    out = {}
    for method in plan.methods:
        means = tuning[tuning.method == method].groupby("lr").auc.mean()
        out[method] = float(lr_rule.best_rate({float(lr): float(v) for lr, v in means.items()}))
    return out


def edge_extensions(plan: StudyPlan, tuning: pd.DataFrame) -> dict[str, float]:
    """Per method whose chosen rate sits on an edge of its rates run (with ``plan.extend_lr_grid``): the rate
    the rule runs next, beyond that edge. Empty: every chosen rate lies inside (or the plan does not extend)."""
    if not plan.extend_lr_grid:
        return {}
    chosen = choose_learning_rates(plan, tuning)
    out = {}
    for method, lr in chosen.items():
        more = lr_rule.beyond_edge(sorted(set(tuning[tuning.method == method].lr)), lr)
        if more is not None:
            out[method] = more
    return out


def at_chosen_rates(pilot: pd.DataFrame, chosen: dict[str, float]) -> pd.DataFrame:
    """The pilot CSV's runs at each method's chosen rate (the tuning's and the pilot's)."""
    return pilot[pilot.apply(lambda r: math.isclose(r.lr, chosen[r.method]), axis=1)]


def real_trainer_markdown(plan: StudyPlan, real: pd.DataFrame, fast: pd.DataFrame) -> str:
    treatment, control = plan.real_trainer_methods
    lines = [
        f"| trainer | seeds | start (%) | final {control} (%) | final {treatment} (%) | {treatment} - {control}, final (points) |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in (("verl (main_copo)", real), ("fast, same seeds", fast[fast.seed.isin(set(real.seed))])):
        d = paired_t(plan, r, treatment, control, "final")
        lines.append(
            f"| {label} | {d.n} | {pct(r.start.mean())} | {pct(r[r.method == control].final.mean())} | "
            f"{pct(r[r.method == treatment].final.mean())} | {interval(d.mean, d.low, d.high)} |"
        )
    gains = real.final - real.start
    lines += ["", f"verl's runs gained {pct(gains.mean(), True)} points on average (final - step 0)."]
    return "\n".join(lines) + "\n"


def phase_budget_lines(runs: pd.DataFrame) -> list[str]:
    """The machine-time table per phase (runs, wall, CPU, CPU per run, generated / useful responses)."""
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
    return lines


def total_line(runs: pd.DataFrame, left_out: str) -> str:
    return (
        f"In all: {len(runs)} runs, {runs.wall_s.sum() / 3600:.2f} h of run wall time and "
        f"{runs.cpu_s.sum() / 3600:.2f} h of CPU time ({left_out} not included)."
    )


def summary_markdown(titles: dict[str, str], fragments: dict[str, str]) -> str:
    """All fragments as one document (``summary.md``), in the order of ``titles``."""
    return "\n".join(f"#### {titles[k]}\n\n{fragments[k]}" for k in titles if k in fragments)


@dataclass(frozen=True)
class Confirmatory:
    """A study's confirmatory data, read from its docs folder, and its comparisons."""

    runs_all: pd.DataFrame  # every phase of runs.csv (confirmatory and real)
    runs: pd.DataFrame  # the confirmatory runs
    blocks: pd.DataFrame  # their blocks
    problems: pd.DataFrame | None
    meta: dict[str, int] | None
    comps: list[Comparison]

    @property
    def real(self) -> pd.DataFrame:
        return self.runs_all[self.runs_all.phase == "real"]


def confirmatory(plan: StudyPlan, docs: Path) -> Confirmatory | None:
    """The confirmatory CSVs of ``docs`` and the plan's comparisons on them (None before that phase)."""
    runs_all = read(docs, "runs.csv")
    if runs_all is None:
        return None
    runs = runs_all[runs_all.phase == "confirmatory"]
    problems = read(docs, "problems.csv")
    meta = json.loads((docs / "problems.json").read_text()) if (docs / "problems.json").is_file() else None
    blocks = read(docs, "blocks.csv")
    return Confirmatory(
        runs_all,
        runs,
        blocks[blocks.phase == "confirmatory"],
        problems,
        meta,
        comparisons(plan, runs, problems, meta),
    )


def confirmatory_fragments(plan: StudyPlan, c: Confirmatory, oneline: str) -> dict[str, str]:
    """The blocks every study states alike once its confirmatory runs are in (``oneline``: its own)."""
    out = {
        "comparisons": comparisons_markdown(plan, c.comps),
        "oneline": oneline,
        "readme": oneline.replace("> **Result in one line.** ", "Measured here: "),
    }
    if len(c.real):
        out["real_trainer"] = real_trainer_markdown(plan, c.real, c.runs)
    return out


def tuning_at_chosen(
    plan: StudyPlan, pilot: pd.DataFrame
) -> tuple[pd.DataFrame, dict[str, float], pd.DataFrame]:
    """The tuning runs of the pilot CSV, the rates they choose, and the pilot CSV's runs at those rates."""
    tuning = pilot[pilot.phase == "tuning"]
    chosen = choose_learning_rates(plan, tuning)
    return tuning, chosen, at_chosen_rates(pilot, chosen)
