"""The testbed specs the studies share: testbed v2's, which v2 trains on and v3 continues (its SFT
policy is the start of v3's noisy continuation). Pre-registered in testbed v2's plan (docs/STUDY_PLAN.md).
"""

from __future__ import annotations

from recipe.study.testbed.build import TestbedSpec
from recipe.study.testbed.mixed import MixedTaskSpec
from recipe.study.testbed.sft import SFTSpec

# testbed v2: two tasks (add, max), each mixing operand lengths; 1800 cosine SFT steps.
TESTBED_V2 = TestbedSpec(task=MixedTaskSpec(), sft=SFTSpec(steps=1800))
