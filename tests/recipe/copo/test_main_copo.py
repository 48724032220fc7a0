"""Hydra's standard flags work on the entry point and the COPO keys carry SPEC's defaults."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import yaml

from copo_core import CopoConfig, GcpoConfig
from tests.paths import REPO


def test_cfg_job_prints_composed_config_with_spec_defaults() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "recipe.copo.main_copo", "--cfg", "job", "algorithm.copo.b=1.5"],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    # the sections carry the dataclasses' defaults (which tests/copo_core/test_config.py checks against
    # the SPEC), with the command line's override
    assert config["algorithm"]["copo"] == {**dataclasses.asdict(CopoConfig()), "b": 1.5}
    assert config["algorithm"]["gcpo"] == dataclasses.asdict(GcpoConfig())
    assert config["algorithm"]["adv_estimator"] == "copo"
    assert config["actor_rollout_ref"]["actor"]["policy_loss"]["loss_mode"] == "copo"
    assert config["reward"]["custom_reward_function"] == {
        "path": "pkg://recipe.reward",
        "name": "compute_score",
    }
    # verl's own keys come through the pkg:// search path
    assert "ppo_mini_batch_size" in config["actor_rollout_ref"]["actor"]


def test_verl_version_pin_matches_installed(tmp_path) -> None:
    import verl

    from recipe.copo import main_copo
    from recipe.verl_pin import check_verl_version, required_verl

    pin = (REPO / "recipe" / "copo" / "REQUIRED_VERL.txt").read_text()
    assert f"verl=={verl.__version__}" in pin.splitlines()
    assert required_verl() == verl.__version__
    assert main_copo.check_verl_version is check_verl_version  # the entry point uses the one reader
    assert check_verl_version() == verl.__version__
    with pytest.raises(RuntimeError, match=rf"verl=={verl.__version__} only, but verl 0\.0\.1 is installed"):
        check_verl_version("0.0.1")
    bad = tmp_path / "REQUIRED_VERL.txt"
    bad.write_text("# comment\nverl>=0.9\n")
    with pytest.raises(ValueError, match="verl==X.Y.Z"):
        required_verl(bad)
