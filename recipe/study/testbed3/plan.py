"""The pre-registered design of the testbed v3 study (docs/STUDY_PLAN.md, "Amendment: testbed v3"): ``PLAN``.

Testbed v3 (``TESTBED_V3``): testbed v2's SFT policy, fine-tuned further on the max task's stream with
a share of corrupted answers on its middle levels (``recipe.study.testbed.noisy``), so that the policy's
greedy answer is often right where its samples at T = 1 are not: headroom that RL's sharpening can
take. One task, ``testbed3/max``: the held-out problems v2 drew for max (unseen by both fine-tunings),
re-split into 1,024 validation and 512 training problems (256 + 128 per level). The tuned rates live
in ``learning_rates.json`` next to this file.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from recipe.study.common.plan import StudyPlan
from recipe.study.common.testbeds import TESTBED_V2
from recipe.study.testbed.build import ContinuedSpec
from recipe.study.testbed.mixed import MixedTaskSpec
from recipe.study.testbed.noisy import NoisyTaskSpec
from recipe.study.testbed.sft import SFTSpec

_V2 = MixedTaskSpec()
MAX_LEVELS = (("max", 2, 2), ("max", 3, 3), ("max", 4, 4), ("max", 5, 5))
NOISY_LEVELS = (("max", 3, 3), ("max", 4, 4))
SFT_NOISE = 0.4  # share of corrupted answers on NOISY_LEVELS in the continued SFT
TESTBED_V3 = ContinuedSpec(
    base=TESTBED_V2,
    task=NoisyTaskSpec(
        # v2's tasks, seed and counts (so the pool is v2's held-out problems); SFT on max only:
        # max2x2 clean (the solved level), max3x3 and max4x4 noisy (the learnable ones), max5x5 left out
        # of the stream (the unsolved one)
        tasks=(_V2.tasks[0], replace(_V2.tasks[1], sft_weights=(1.0, 1.5, 1.5, 0.0))),
        sft_task_weights=(0.0, 1.0),
        sft_only_weights=(0.0,),
        sft_noise=tuple((level, SFT_NOISE) for level in NOISY_LEVELS),
        rl_levels=tuple((level, 256) for level in MAX_LEVELS),
    ),
    sft=SFTSpec(steps=400, lr=1e-3, warmup_steps=20, min_lr_ratio=0.1),
)

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
