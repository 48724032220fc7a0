"""The pre-registered design of the testbed v2 study (docs/STUDY_PLAN.md states it in prose): ``PLAN``.

Testbed v2 (two tasks, add and max, each mixing operand lengths; 1800 cosine SFT steps) on its
workload config (``testbed2_cpu``). The learning rates the tuning chose live in ``learning_rates.json``
next to this file, written by ``study_testbed2.py pilot-summarize`` and committed before the
confirmatory runs. The confirmatory phase was stopped after its first seed (docs/STUDY_PLAN.md,
status): its finished runs are exploratory and no confirmatory analysis is made.
"""

from __future__ import annotations

from pathlib import Path

from recipe.study.common.jobs import CONFIG_NAME
from recipe.study.common.plan import StudyPlan
from recipe.study.common.testbeds import TESTBED_V2

PLAN = StudyPlan(
    name="testbed2",
    testbed=TESTBED_V2,
    config_name=CONFIG_NAME,
    tasks=("add", "max"),
    methods=("grpo", "copo_soft_with_zero", "copo_soft", "dapo_filter"),
    baseline="grpo",
    primary=("copo_soft_with_zero", "grpo"),  # the paper's setting against GRPO
    secondary=(("copo_soft", "grpo"), ("dapo_filter", "grpo"), ("copo_soft_with_zero", "dapo_filter")),
    tuning_seeds=(1000, 1001),
    pilot_seeds=(1002, 1003, 1004, 1005),
    confirmatory_seeds=tuple(range(20)),
    real_trainer_seeds=(0, 1, 2, 3, 4),
    lr_grid=(3e-5, 1e-4, 3e-4),
    learning_rates_file=Path(__file__).with_name("learning_rates.json"),
    rate_rule="highest mean AUC over the tuning seeds (ties: smaller lr)",
    confirmatory_stopped=True,
)
