"""The pre-registered design of the testbed v3 study (docs/STUDY_PLAN.md, "Amendment: testbed v3"): ``PLAN``.

Testbed v3 (``TESTBED_V3``): testbed v2's SFT policy, fine-tuned further on the max task's stream with
a share of corrupted answers on its middle levels (``recipe.study.testbed.noisy``), so that the policy's
greedy answer is often right where its samples at T = 1 are not: headroom that RL's sharpening can
take. One task, ``testbed3/max``: the held-out problems v2 drew for max (unseen by both fine-tunings),
re-split into 1,024 validation and 512 training problems (256 + 128 per level). The tuned rates live
in ``learning_rates.json`` next to this file. The spec ``TESTBED_V3`` lives in
``recipe.study.common.testbeds`` (the regime map, testbed v4, trains on its policy).
"""

from __future__ import annotations

from pathlib import Path

from recipe.study.common.plan import StudyPlan
from recipe.study.common.testbeds import TESTBED_V3

PLAN = StudyPlan(
    name="testbed3",
    testbed=TESTBED_V3,
    config_name="testbed3_cpu",
    tasks=("max",),
    methods=("grpo", "copo_soft_with_zero", "copo_soft", "dapo_filter"),
    baseline="grpo",
    primary=("copo_soft_with_zero", "grpo"),  # the paper's setting against GRPO
    secondary=(("copo_soft", "grpo"), ("dapo_filter", "grpo"), ("copo_soft_with_zero", "dapo_filter")),
    tuning_seeds=(3000,),
    pilot_seeds=(3001, 3002),  # with the tuning seed at the chosen rates: 3 paired seeds for the power
    confirmatory_seeds=tuple(range(100, 120)),
    real_trainer_seeds=(100, 101),
    lr_grid=(5e-5, 1e-4, 2e-4),
    learning_rates_file=Path(__file__).with_name("learning_rates.json"),
    rate_rule="highest mean AUC over the tuning seeds (ties: the smaller rate)",
    power_seeds=(20, 10, 6),
    # fixed before any confirmatory run, independent of the results: the runs go seed by seed
    confirmatory_deadline_utc="2026-11-26T10:45:00+00:00",
)
