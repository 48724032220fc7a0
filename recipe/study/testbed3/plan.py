"""The pre-registered design of the testbed v3 study, in one place (docs/STUDY_PLAN.md, "Amendment: testbed v3").

Testbed v3 (``TESTBED_V3``): testbed v2's SFT policy, fine-tuned further on the max task's stream with
a share of corrupted answers on its middle levels (``recipe.study.testbed.noisy``), so that the policy's
greedy answer is often right where its samples at T = 1 are not: headroom that RL's sharpening can
take. One task, ``testbed3/max``: the held-out problems v2 drew for max (unseen by both fine-tunings),
re-split into 1,024 validation and 512 training problems (256 + 128 per level). Everything the runs,
the tuning and the analysis read lives here; the tuned rates in ``learning_rates.json`` next to it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

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
CONFIG_NAME = "testbed3_cpu"
SOURCE_PREFIX = "testbed3/"
TASKS = ("max",)

BASELINE = "grpo"
METHODS = ("grpo", "copo_soft_with_zero", "copo_soft", "dapo_filter")
PRIMARY = ("copo_soft_with_zero", "grpo")  # (treatment, control): the paper's setting against GRPO
# Holm-corrected family (treatment, control)
SECONDARY = (("copo_soft", "grpo"), ("dapo_filter", "grpo"), ("copo_soft_with_zero", "dapo_filter"))

TUNING_SEEDS = (3000,)
PILOT_SEEDS = (3001, 3002)  # with the tuning seed at the chosen rates: 3 paired seeds for the power
PILOT_METHODS = PRIMARY
CONFIRMATORY_SEEDS = tuple(range(100, 120))
# Time-based stop (fixed before any confirmatory run, independent of the results): the runs go seed by
# seed (all methods of a seed, then the next); none starts after CONFIRMATORY_DEADLINE_UTC, and the
# analysis takes every seed whose runs of all methods finished. The power is stated for fewer seeds too.
CONFIRMATORY_DEADLINE_UTC = "2026-11-26T10:45:00+00:00"
POWER_SEEDS = (20, 10, 6)
REAL_TRAINER_SEEDS = (100, 101)  # a subset of the confirmatory seeds
REAL_TRAINER_METHODS = PRIMARY

LR_GRID = (5e-5, 1e-4, 2e-4)
ALPHA = 0.05
POWER = 0.80
BLOCK_STEPS = 10  # the regime criteria are checked per block of training steps
GAIN_TARGET = 0.10  # testbed criterion: GRPO's final - start validation accuracy, mean over seeds
GAIN_FLOOR = 0.05  # ... with its 95% interval above this
ZERO_VARIANCE_MIN = 0.30
ALL_CORRECT_MIN = 0.10
ALL_WRONG_MIN = 0.10

LEARNING_RATES_FILE = Path(__file__).with_name("learning_rates.json")


def learning_rates() -> dict[str, float]:
    """The tuned learning rate of every method (raises when the tuning has not been summarised)."""
    if not LEARNING_RATES_FILE.is_file():
        raise FileNotFoundError(
            f"{LEARNING_RATES_FILE} is missing: run `python scripts/study_testbed3.py tune` and "
            "`pilot-summarize` first (docs/STUDY_PLAN.md, amendment: testbed v3)"
        )
    rates = json.loads(LEARNING_RATES_FILE.read_text())["learning_rates"]
    missing = [m for m in METHODS if m not in rates]
    if missing:
        raise ValueError(f"{LEARNING_RATES_FILE}: no learning rate for {missing}")
    return {m: float(rates[m]) for m in METHODS}
