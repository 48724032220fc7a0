"""Shared by the fault tests: the tiny model and data, and one uninterrupted reference run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import TinyRun, build_inputs, logged_steps, run_to_end, tiny_run

# The worker test's three legs each train one step and may finish one more before a death is felt, so
# its last relaunch trains step 7 at most: the reference must hold it.
REFERENCE_STEPS = 7


@pytest.fixture(scope="session")
def fault_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return build_inputs(tmp_path_factory.mktemp("fault_inputs"))


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory, fault_inputs) -> TinyRun:
    """The same run, never interrupted: what each resumed step's prompts are compared with."""
    run = tiny_run(tmp_path_factory.mktemp("reference"), fault_inputs)
    done = run_to_end(run.command(REFERENCE_STEPS), run.folder / "train.log")
    assert done.rc == 0 and not done.left, done.log[-6000:]
    assert logged_steps(run.metrics) == list(range(1, REFERENCE_STEPS + 1))
    return run
