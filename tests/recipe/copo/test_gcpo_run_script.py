"""run_gcpo_qwen2.5_7b.sh: the COPO 7B base settings with GCPO's estimator, composing to a valid config."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from recipe.copo.config_check import compose_and_validate
from tests.paths import REPO

SCRIPT = REPO / "recipe" / "copo" / "run_gcpo_qwen2.5_7b.sh"
BASE = REPO / "recipe" / "copo" / "run_copo_qwen2.5_7b.sh"


def dry_run(script: Path, *args: str, **env: str) -> list[str]:
    proc = subprocess.run(
        ["bash", str(script), *args],
        cwd=REPO,
        env={**os.environ, "DRY_RUN": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    argv = shlex.split(lines[0])
    at = argv.index("recipe.copo.main_copo")
    return argv[at + 1 :]


def test_same_base_settings_as_copo_7b_except_the_estimator():
    gcpo = dry_run(SCRIPT)
    copo = dry_run(BASE)
    assert "algorithm.adv_estimator=gcpo" in gcpo
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla" in gcpo
    differing = {o.split("=", 1)[0] for o in set(gcpo) ^ set(copo)}
    assert differing <= {
        "algorithm.adv_estimator",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
        "trainer.experiment_name",
        "trainer.default_local_dir",
    } | {o.split("=", 1)[0] for o in gcpo if o.startswith("algorithm.gcpo.")}


def test_composes_and_validates_with_gcpo_keys_and_user_overrides_last():
    overrides = dry_run(SCRIPT, "algorithm.gcpo.beta=0.5", GCPO_ALPHA="2.0", GCPO_EMBEDDER="hash")
    assert overrides[-1] == "algorithm.gcpo.beta=0.5"
    config = compose_and_validate(overrides)
    assert config.algorithm.adv_estimator == "gcpo"
    assert config.algorithm.gcpo.alpha == 2.0
    assert config.algorithm.gcpo.beta == 0.5
    assert config.algorithm.gcpo.embedder == "hash"
    assert config.actor_rollout_ref.rollout.n == 8
    assert config.data.train_batch_size == 512
