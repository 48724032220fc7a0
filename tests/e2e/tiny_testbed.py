"""A tiny testbed (seconds of SFT) for the end-to-end tests of the study driver.

``python -m tests.e2e.tiny_testbed CACHE RUNS STEPS METHODS`` runs the testbed driver
(``recipe.study.driver.run_jobs``) on it, one seed, two runs at a time, and exits like
``study_cpu.py testbed run`` does on a stop signal (tests/e2e/test_stop.py signals it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from recipe.models.tiny import ModelShape
from recipe.proc import Stopped
from recipe.study.driver import run_jobs
from recipe.study.testbed import build as testbed_build
from recipe.study.testbed.runs import make_jobs
from recipe.study.testbed.sft import SFTSpec
from recipe.study.testbed.task import TaskSpec

SPEC = testbed_build.TestbedSpec(
    task=TaskSpec(
        levels=(("max", 2, 2), ("add", 2, 2)), sft_weights=(1.0, 1.0), train_per_level=64, val_per_level=8
    ),
    model=ModelShape(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64),
    sft=SFTSpec(steps=20, batch_size=16),
)


def main(argv: list[str]) -> int:
    cache, runs, steps, methods = Path(argv[0]), Path(argv[1]), int(argv[2]), argv[3].split(",")
    testbed = testbed_build.ensure_testbed(SPEC, root=cache)
    try:
        return (
            1 if run_jobs(make_jobs(testbed, methods, [0], runs, steps=steps), parallel=2, poll_s=1.0) else 0
        )
    except Stopped as stop:
        return stop.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
