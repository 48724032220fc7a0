"""The pre-registered design of the testbed v2 study, in one place (docs/STUDY_PLAN.md states it in prose).

Everything the runs, the tuning and the analysis read: the testbed, the methods and their
comparisons, the seeds of each phase, the learning-rate grid and the endpoint's parameters. The
learning rates the tuning chose live in ``learning_rates.json`` next to this file, written by
``study_testbed2.py tune-summarize`` and committed before the confirmatory runs.
"""

from __future__ import annotations

import json
from pathlib import Path

# testbed v2 (two tasks, add and max, each mixing operand lengths; 1800 cosine SFT steps) and its
# workload config (testbed2_cpu): spelled where testbed v3 reads them too
from recipe.study.common.jobs import CONFIG_NAME
from recipe.study.common.testbeds import TESTBED_V2

BASELINE = "grpo"
METHODS = ("grpo", "copo_soft_with_zero", "copo_soft", "dapo_filter")
PRIMARY = ("copo_soft_with_zero", "grpo")  # (treatment, control): the paper's setting against GRPO
# Holm-corrected family (treatment, control)
SECONDARY = (("copo_soft", "grpo"), ("dapo_filter", "grpo"), ("copo_soft_with_zero", "dapo_filter"))

CONFIRMATORY_SEEDS = tuple(range(20))
TUNING_SEEDS = (1000, 1001)
PILOT_SEEDS = (1002, 1003, 1004, 1005)  # with the tuning seeds: the pilot of the power estimate
PILOT_METHODS = PRIMARY
REAL_TRAINER_SEEDS = (
    0,
    1,
    2,
    3,
    4,
)  # the confirmation through verl's trainer (a subset of the confirmatory seeds)
REAL_TRAINER_METHODS = PRIMARY

LR_GRID = (3e-5, 1e-4, 3e-4)
# The confirmatory phase was stopped after its first seed (docs/STUDY_PLAN.md, status): its finished
# runs are exploratory and no confirmatory analysis is made.
CONFIRMATORY_STOPPED = True
ALPHA = 0.05
POWER = 0.80
BLOCK_STEPS = 10  # the regime criteria (zero-variance, all-correct, all-wrong shares) are checked per block
GAIN_TARGET = 0.10  # testbed criterion: GRPO's final - start validation accuracy, mean over seeds
GAIN_FLOOR = 0.05  # ... with its 95% interval above this
ZERO_VARIANCE_MIN = 0.30
ALL_CORRECT_MIN = 0.10
ALL_WRONG_MIN = 0.10

LEARNING_RATES_FILE = Path(__file__).with_name("learning_rates.json")


__all__ = ["CONFIG_NAME", "TESTBED_V2"]  # and every constant below


def learning_rates() -> dict[str, float]:
    """The tuned learning rate of every method (raises when the tuning has not been summarised)."""
    if not LEARNING_RATES_FILE.is_file():
        raise FileNotFoundError(
            f"{LEARNING_RATES_FILE} is missing: run `python scripts/study_testbed2.py tune` and "
            "`tune-summarize` first (docs/STUDY_PLAN.md, tuning)"
        )
    rates = json.loads(LEARNING_RATES_FILE.read_text())["learning_rates"]
    missing = [m for m in METHODS if m not in rates]
    if missing:
        raise ValueError(f"{LEARNING_RATES_FILE}: no learning rate for {missing}")
    return {m: float(rates[m]) for m in METHODS}
