"""The testbed specs the studies share: testbed v2's, which v2 trains on and v3 continues (its SFT
policy is the start of v3's noisy continuation), and testbed v3's, whose policy the regime map
(testbed v4) trains on. Pre-registered in testbed v2's plan and v3's amendment (docs/STUDY_PLAN.md).
"""

from __future__ import annotations

from dataclasses import replace

from recipe.study.testbed.build import ContinuedSpec, TestbedSpec
from recipe.study.testbed.mixed import MixedTaskSpec
from recipe.study.testbed.noisy import NoisyTaskSpec
from recipe.study.testbed.sft import SFTSpec

# testbed v2: two tasks (add, max), each mixing operand lengths; 1800 cosine SFT steps.
TESTBED_V2 = TestbedSpec(task=MixedTaskSpec(), sft=SFTSpec(steps=1800))

# testbed v3: v2's SFT policy fine-tuned further on the max task's stream with a share of corrupted
# answers on its middle levels (recipe.study.testbed.noisy): a policy whose greedy answer is often right
# where its samples at T = 1 are not. Its RL data: v2's held-out max problems, re-split per level.
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
