"""COPO through verl 0.9.1's real v1 trainer on CPU: the recipe's trainer subclass computes the
COPO fields on the driver, the workers train with the installed COPO loss, metrics reach the
tracking backends and trainer.metrics_jsonl. Tiny random Qwen2 + a parity reward (see
tests/e2e/parity_reward.py) so groups have non-zero advantages and several answer classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cpu_run import read_jsonl, run_module, tiny_recipe_overrides

pytestmark = pytest.mark.e2e

COPO_METRICS = (
    "copo/entropy_mean",
    "copo/local_weight_mean",
    "copo/global_adv_std",
    "signal/frac_groups_all_correct",  # the group fractions are logged once, under signal/
    "actor/pg_loss",
    "actor/pg_loss_local",
    "actor/pg_loss_global",
    "actor/pg_clipfrac_local",
    "actor/pg_clipfrac_global",
    "actor/ppo_kl",
    "actor/kl_loss",
    "critic/score/mean",
)


def test_copo_trains_two_steps_on_cpu(tmp_path: Path) -> None:
    base, ckpt = tiny_recipe_overrides(tmp_path)
    overrides = [
        *base,
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    ]
    result = run_module("recipe.copo.main_copo", overrides, log_path=tmp_path / "train.log", timeout=900)
    assert result.returncode == 0, result.log[-6000:]
    records = read_jsonl(ckpt / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        missing = [key for key in COPO_METRICS if key not in record]
        assert not missing, f"missing {missing} in {sorted(record)}"
        assert record["actor/pg_loss"] == pytest.approx(
            record["actor/pg_loss_local"] + record["actor/pg_loss_global"], abs=1e-5
        )
        assert 0.0 <= record["copo/local_weight_mean"] <= 1.0
    assert any(r.get("actor/grad_norm", 0.0) > 0 for r in records)


@pytest.mark.parametrize("local", ["drgrpo", "rloo"])
def test_copo_over_another_local_estimator_trains_on_cpu(tmp_path: Path, local: str) -> None:
    """algorithm.copo.local_estimator under main_copo: one step, and the local term the actor trained on
    (the dumped step batch) is copo_core's maths of that name on the step's rewards."""
    import torch

    from copo_core import compute_copo_advantages

    base, ckpt = tiny_recipe_overrides(tmp_path, steps=1)
    dump = tmp_path / "dump"
    overrides = [*base, f"algorithm.copo.local_estimator={local}", f"trainer.batch_dump_dir={dump}"]
    result = run_module("recipe.copo.main_copo", overrides, log_path=tmp_path / "train.log", timeout=900)
    assert result.returncode == 0, result.log[-6000:]
    records = read_jsonl(ckpt / "metrics.jsonl")
    assert [r["step"] for r in records] == [1]
    assert "copo/entropy_mean" in records[0] and "actor/pg_loss_local" in records[0]
    batch = torch.load(dump / "step_1.pt", weights_only=False)
    scores = torch.stack([row.float().sum() for row in batch["rm_scores"]])
    uids = [str(u) for u in batch["uid"]]
    expected = compute_copo_advantages(scores, uids, entropy_source="reward", local_estimator=local).local_adv
    trained = torch.stack([row[0] for row in batch["copo_local_adv"]])
    assert torch.equal(trained, expected)
    assert bool((trained != 0).any()), "the parity reward should give mixed groups"


def test_wrong_answer_global_variant_trains_on_cpu(tmp_path: Path) -> None:
    """algorithm.copo.wrong_answer_global=nonpositive (this project's variant, not the paper's) under main_copo:
    two steps, and the global advantage the actor trained on (the dumped step batches) is copo_core's variant
    on each step's rewards: never positive for a wrong answer, the paper's value everywhere else."""
    import torch

    from copo_core import compute_copo_advantages

    base, ckpt = tiny_recipe_overrides(tmp_path, steps=2)
    dump = tmp_path / "dump"
    overrides = [*base, "algorithm.copo.wrong_answer_global=nonpositive", f"trainer.batch_dump_dir={dump}"]
    result = run_module("recipe.copo.main_copo", overrides, log_path=tmp_path / "train.log", timeout=900)
    assert result.returncode == 0, result.log[-6000:]
    assert [r["step"] for r in read_jsonl(ckpt / "metrics.jsonl")] == [1, 2]
    capped_total = wrong_total = 0
    for step in (1, 2):
        batch = torch.load(dump / f"step_{step}.pt", weights_only=False)
        scores = torch.stack([row.float().sum() for row in batch["rm_scores"]])
        uids = [str(u) for u in batch["uid"]]
        preds = [info.get("pred") for info in batch["reward_extra_info"]]
        expected = compute_copo_advantages(scores, uids, preds, wrong_answer_global="nonpositive").global_adv
        trained = torch.stack([row[0] for row in batch["copo_global_adv"]])
        assert torch.equal(trained, expected)
        assert bool((trained[scores == 0] <= 0).all())
        paper = compute_copo_advantages(scores, uids, preds).global_adv  # the paper's rule on the same step
        capped = (scores == 0) & (paper > 0)
        assert torch.equal(trained[~capped], paper[~capped]) and bool((trained[capped] == 0).all())
        capped_total += int(capped.sum())
        wrong_total += int((scores == 0).sum())
    print(f"wrong answers whose global advantage the variant capped: {capped_total} of {wrong_total}")
