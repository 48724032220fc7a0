"""GCPO through verl 0.9.1's real v1 trainer on CPU: the recipe trainer computes GCPO's advantage
(recipe.copo.gcpo_step.gcpo_advantage) on the driver every step, for adv_estimator=gcpo (vanilla loss, hashing embedder) and for COPO with
GCPO's local term (shipped MiniLM embedder). Tiny random Qwen2 + the parity reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cpu_run import read_jsonl, run_module, tiny_recipe_overrides

pytestmark = pytest.mark.e2e

GCPO_METRICS = (
    "gcpo/coverage_mean",
    "gcpo/uniqueness_mean",
    "gcpo/frac_redundant_correct",
    "gcpo/embed_time_s",
    "gcpo/shapley_time_s",
    "actor/pg_loss",
    "critic/score/mean",
)


@pytest.mark.parametrize(
    ("estimator", "loss_mode", "embedder", "extra"),
    [
        ("gcpo", "vanilla", "hash", []),
        ("copo", "copo", "minilm", ["algorithm.copo.local_estimator=gcpo"]),
    ],
    ids=["gcpo-hash", "copo-local-gcpo-minilm"],
)
def test_gcpo_trains_two_steps_on_cpu(tmp_path: Path, estimator, loss_mode, embedder, extra) -> None:
    base, ckpt = tiny_recipe_overrides(tmp_path)
    overrides = [
        *base,
        f"algorithm.adv_estimator={estimator}",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
        f"algorithm.gcpo.embedder={embedder}",
        "algorithm.gcpo.embed_batch_size=8",
        *extra,
    ]
    result = run_module("recipe.copo.main_copo", overrides, log_path=tmp_path / "train.log", timeout=900)
    assert result.returncode == 0, result.log[-6000:]
    records = read_jsonl(ckpt / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        missing = [key for key in GCPO_METRICS if key not in record]
        assert not missing, f"missing {missing} in {sorted(record)}"
        assert record["gcpo/coverage_mean"] >= 0.0
        assert 0.0 <= record["gcpo/frac_redundant_correct"] <= 1.0
        if estimator == "copo":
            assert "copo/entropy_mean" in record
    assert any(r.get("actor/grad_norm", 0.0) > 0 for r in records)
