"""What the regime map costs on this machine, from the measured CPU seconds (``cost.csv``).

``cost.csv`` holds one row per trainer measured by ``study_testbed4.py cost``: the single-seed fast
trainer and the batched many-seeds trainer (``recipe.study.fast.seeds``, S seeds in one process), each
a few GRPO steps at the regimes' workload (G = 8 x 64 prompts) on one regime's data, with its CPU
seconds per run and step, per run and validation, the planned budget (steps, validation period) read
from the composed config, and the load. A run costs ``steps x step + validations x validation``.

The study (:class:`Design`): per regime, the tuning grid (every tuned method at every rate on the tuning
seeds), the pilot and the confirmatory runs (every confirmatory method on every confirmatory seed); the
rows: the planned design, the reductions weighed, and the accepted one (``ACCEPTED``, docs/STUDY_PLAN.md,
"Decided"). The batched trainer can take only the confirmatory runs of a method that is
not DAPO (a tuning run is one seed at one rate; DAPO's rounds differ per seed), so the rest are priced
single. Compute-matched DAPO stops at the others' number of generated samples: priced as one run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

COST_COLUMNS = [
    "trainer",
    "seeds_in_batch",
    "steps_measured",
    "step_cpu_s",
    "val_cpu_s",
    "val_problems",
    "planned_steps",
    "test_freq",
    "load1_start",
    "load1_end",
    "gflops",
]
CORES = 2  # this machine: two runs at a time, one thread each


@dataclass(frozen=True)
class Design:
    """The counts that set the study's cost (the amendment's numbers; ``recipe/study/testbed4/plan.py``)."""

    label: str
    regimes: int = 3
    methods: int = 5  # the confirmatory methods
    batchable_methods: int = 4  # all but dapo_filter
    confirmatory_seeds: int = 20
    rates: int = 3  # the learning-rate grid (its extensions beyond an edge: not known before the tuning)
    tuning_seeds: int = 1
    pilot_runs: int = 4  # the primary pair x 2 pilot seeds
    steps_factor: float = 1.0  # a fraction of the planned steps (validation period kept)
    tuned_methods: int | None = None  # the methods tuned (None: the confirmatory ones)

    def runs(self) -> dict[str, int]:
        tuned = self.methods if self.tuned_methods is None else self.tuned_methods
        per = {
            "tuning": tuned * self.rates * self.tuning_seeds,
            "pilot": self.pilot_runs,
            "confirmatory": self.methods * self.confirmatory_seeds,
        }
        return {k: v * self.regimes for k, v in per.items()}


FULL = Design("as planned: 3 regimes x 5 methods x 20 seeds, 150 steps, tuning grid of 3 rates")
_THREE = replace(FULL, methods=3, batchable_methods=3)  # grpo, copo_soft_with_zero, the variant
REDUCTIONS = (
    FULL,
    replace(FULL, label="100 steps", steps_factor=2 / 3),
    replace(FULL, label="4 methods (copo_soft not confirmatory), 100 steps", methods=4, batchable_methods=3,
            steps_factor=2 / 3),
    replace(_THREE, label="3 methods (grpo, copo_soft_with_zero, the variant), 150 steps"),
    replace(_THREE, label="3 methods, 100 steps", steps_factor=2 / 3),
)  # fmt: skip
# The design docs/STUDY_PLAN.md accepted ("Decided"): every method tuned and piloted, three confirmatory, 90
# of the planned 150 steps (validations 0, 30, 60, 90).
ACCEPTED = replace(
    _THREE,
    label="accepted: 5 methods tuned (3 rates) and piloted (2 seeds), 3 methods x 20 confirmatory seeds, 90 steps",
    tuned_methods=5,
    pilot_runs=5 * 2,
    steps_factor=90 / 150,
)
DESIGNS = (*REDUCTIONS, ACCEPTED)  # the budget table's rows


def run_cpu_s(row: pd.Series, steps_factor: float = 1.0) -> float:
    """CPU seconds of one run of the planned budget (scaled) by the trainer of ``row``."""
    steps = round(int(row.planned_steps) * steps_factor)
    validations = steps // int(row.test_freq) + 1 + (steps % int(row.test_freq) != 0)
    return steps * float(row.step_cpu_s) + validations * float(row.val_cpu_s)


def study_cpu_hours(cost: pd.DataFrame, design: Design, batched: bool) -> float:
    """CPU hours of the whole design; ``batched``: the batchable confirmatory runs by the batched trainer."""
    single = run_cpu_s(cost[cost.trainer == "single"].iloc[0], design.steps_factor)
    many = run_cpu_s(cost[cost.trainer == "batched"].iloc[0], design.steps_factor) if batched else single
    runs = design.runs()
    batchable = design.regimes * design.batchable_methods * design.confirmatory_seeds
    seconds = (runs["tuning"] + runs["pilot"] + runs["confirmatory"] - batchable) * single + batchable * many
    return seconds / 3600


def cost_markdown(cost: pd.DataFrame) -> str:
    lines = [
        "| trainer | seeds in one process | steps measured | CPU-s per step | CPU-s per validation "
        "(problems x 4) | CPU-s per run (planned budget) | load (start, end) | GFLOP/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in cost.iterrows():
        lines.append(
            f"| {r.trainer} | {r.seeds_in_batch} | {r.steps_measured} | {r.step_cpu_s:.2f} | "
            f"{r.val_cpu_s:.2f} ({r.val_problems}) | {run_cpu_s(r):.0f} | {r.load1_start:.1f}, {r.load1_end:.1f} | "
            f"{r.gflops:.0f} |"
        )
    r = cost.iloc[0]
    lines += [
        "",
        f"GRPO at the regimes' workload (G = 8 x 64 prompts), per run (the batched trainer's seconds divided "
        f"by its seeds); a run of the planned budget is {r.planned_steps} steps and a validation every "
        f"{r.test_freq} steps and at step 0. One thread per run; the machine shared (load beside).",
    ]
    return "\n".join(lines) + "\n"


def budget_markdown(cost: pd.DataFrame) -> str:
    lines = [
        "| design | runs (tuning, pilot, confirmatory) | CPU hours, single-seed trainer | CPU hours, batched "
        f"confirmatory runs | machine hours at {CORES} runs at a time (the cheaper) |",
        "|---|---|---|---|---|",
    ]
    for design in DESIGNS:
        runs = design.runs()
        single, batched = study_cpu_hours(cost, design, False), study_cpu_hours(cost, design, True)
        lines.append(
            f"| {design.label} | {runs['tuning']}, {runs['pilot']}, {runs['confirmatory']} | {single:.1f} | "
            f"{batched:.1f} | {min(single, batched) / CORES:.1f} |"
        )
    return "\n".join(lines) + "\n"


def reading_markdown(cost: pd.DataFrame) -> str:
    """The budget's numbers the plan's prose reads (the full design, the batched trainer, validation's
    share of a run, the proposed reductions)."""
    single, batched = (cost[cost.trainer == t].iloc[0] for t in ("single", "batched"))
    full = min(study_cpu_hours(cost, FULL, False), study_cpu_hours(cost, FULL, True))
    three, four = (
        min(study_cpu_hours(cost, d, b) for b in (False, True)) for d in (REDUCTIONS[4], REDUCTIONS[2])
    )
    accepted = min(study_cpu_hours(cost, ACCEPTED, b) for b in (False, True))
    run = run_cpu_s(single)
    validation = run - int(single.planned_steps) * float(single.step_cpu_s)
    return (
        f"- As planned: **{full:.0f} CPU hours**, {full / CORES:.0f} hours of this {CORES}-core machine with "
        "nothing else on it.\n"
        f"- The batched trainer, {batched.seeds_in_batch} seeds in one process: "
        f"{float(batched.step_cpu_s) / float(single.step_cpu_s):.2f}x a single seed's CPU seconds per seed and "
        f"step ({float(batched.step_cpu_s):.2f} against {float(single.step_cpu_s):.2f}).\n"
        f"- Validation: {100 * validation / run:.0f}% of a run's CPU seconds ({validation:.0f} of {run:.0f}).\n"
        f"- Proposed reduction (3 methods, 100 steps): **{three:.0f} CPU hours**, {three / CORES:.0f} machine "
        f"hours; with `dapo_filter` kept (4 methods, 100 steps): {four:.0f} CPU hours.\n"
        f"- Accepted (90 steps; every method tuned and piloted, 3 confirmatory): **{accepted:.1f} CPU hours**, "
        f"{accepted / CORES:.1f} machine hours, {sum(ACCEPTED.runs().values())} runs; each extension of a "
        f"learning-rate grid beyond its edge adds one run ({run_cpu_s(single, ACCEPTED.steps_factor):.0f} CPU-s).\n"
    )
