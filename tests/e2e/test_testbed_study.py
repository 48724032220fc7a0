"""The testbed study end to end with verl's real trainer: a tiny testbed, two methods x one seed x
two steps through the driver, then the analysis (marker e2e: about 3 minutes on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipe.study.driver import run_jobs
from recipe.study.testbed import analysis
from recipe.study.testbed import build as testbed_build
from recipe.study.testbed.runs import make_jobs
from recipe.tracking.jsonl import read_metrics_jsonl
from tests.e2e.tiny_testbed import SPEC

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(900)
def test_two_methods_train_and_summarize(tmp_path: Path) -> None:
    testbed = testbed_build.ensure_testbed(SPEC, root=tmp_path / "cache")
    methods = ["grpo", "copo_soft_with_zero"]
    jobs = make_jobs(testbed, methods, [0], tmp_path / "runs", steps=2)
    assert run_jobs(jobs, parallel=2, poll_s=1.0) == []
    for job in jobs:
        rows = read_metrics_jsonl(job.out / "metrics.jsonl")
        assert [r["step"] for r in rows] == [0, 1, 2]
        assert rows[1]["signal/num_responses"] == 64.0  # 16 prompts x 4 responses
        assert "val-core/testbed/add2x2/acc/mean@1" in rows[0]  # greedy validation, per level
    assert jobs[1].out.joinpath("metrics.jsonl").read_text().count("copo/entropy_mean") == 2
    result = analysis.summarize(tmp_path / "runs", tmp_path / "docs", methods, [0], test_freq=5)
    assert {r["method"] for r in result["runs"]} == set(methods)
    assert (tmp_path / "docs" / "summary.md").read_text().count("| grpo |") == 2
