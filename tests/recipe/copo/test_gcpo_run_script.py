"""run_gcpo_qwen2.5_7b.sh: the COPO 7B base settings with GCPO's estimator, composing to a valid config."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.copo.config_check import compose, compose_and_validate
from tests.paths import REPO

SCRIPT = REPO / "recipe" / "copo" / "run_gcpo_qwen2.5_7b.sh"
BASE = REPO / "recipe" / "copo" / "run_copo_qwen2.5_7b.sh"


@pytest.fixture(autouse=True)
def _paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATA_DIR", "/shared/data")
    monkeypatch.setenv("CKPT_DIR", "/shared/ckpts")


def dry_run(script: Path, *args: str, **env: str) -> tuple[str, list[str]]:
    """(config name, overrides) of the command the script prints with DRY_RUN=1."""
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
    assert argv[at + 1] == "--config-name"
    return argv[at + 2], argv[at + 3 :]


def flat(config) -> dict[str, object]:
    """Dotted key -> value of a composed config (interpolations left as written)."""
    out: dict[str, object] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(config, resolve=False), "")
    return out


def test_same_base_settings_as_copo_7b_except_the_estimator():
    gcpo_name, gcpo_args = dry_run(SCRIPT)
    copo_name, copo_args = dry_run(BASE)
    gcpo, copo = flat(compose(gcpo_args, config_name=gcpo_name)), flat(compose(copo_args, config_name=copo_name))
    assert gcpo["algorithm.adv_estimator"] == "gcpo"
    assert gcpo["actor_rollout_ref.actor.policy_loss.loss_mode"] == "vanilla"
    differing = {key for key in set(gcpo) | set(copo) if gcpo.get(key) != copo.get(key)}
    assert differing <= {
        "algorithm.adv_estimator",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
        "trainer.experiment_name",
        "trainer.default_local_dir",
    } | {key for key in gcpo if key.startswith("algorithm.gcpo.")}


def test_composes_and_validates_with_gcpo_keys_and_user_overrides_last():
    name, overrides = dry_run(
        SCRIPT, "algorithm.gcpo.alpha=2.0", "algorithm.gcpo.embedder=hash", "algorithm.gcpo.beta=0.5"
    )
    assert overrides[-1] == "algorithm.gcpo.beta=0.5"
    config = compose_and_validate(overrides, config_name=name)
    assert config.algorithm.adv_estimator == "gcpo"
    assert config.algorithm.gcpo.alpha == 2.0
    assert config.algorithm.gcpo.beta == 0.5
    assert config.algorithm.gcpo.embedder == "hash"
    assert config.actor_rollout_ref.rollout.n == 8
    assert config.data.train_batch_size == 512
