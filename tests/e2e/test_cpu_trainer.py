"""verl 0.9.1's real trainer on CPU through ``python -m recipe.copo.main_copo --config-name copo_cpu``.

Tiny random 2-layer Qwen2 with a byte-level tokenizer (built at test time), 16 prompts, 4 prompts x
4 responses per step. The reward is tests/e2e/parity_reward.py (response length parity): the
random model's outputs would score 0 under a math verifier, which leaves every group
zero-variance; parity gives mixed groups, so COPO's two loss terms both get exercised.

Each run is a subprocess that starts and stops its own local Ray cluster.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from recipe.launch import TINY_CPU, tiny_run
from recipe.models.tiny import build_tiny_qwen2
from tests.e2e.cpu_run import PARITY_REWARD, RunResult, read_jsonl, run_module, write_prompt_parquet

pytestmark = pytest.mark.e2e

# Per trainer run. A run takes about 1.5-3 min on 2 idle cores (Ray start-up is most of it);
# the margin is for CI machines shared with other jobs.
RUN_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cpu_e2e")
    build_tiny_qwen2(root / "tiny")
    write_prompt_parquet(root / "train.parquet", 16, seed=0)
    write_prompt_parquet(root / "val.parquet", 8, seed=1)
    return root


def copo_cpu_run(ws: Path, out: Path, *, steps: int, extra: list[str] = ()) -> tuple[RunResult, list[dict]]:
    """Train ``steps`` steps in ``out`` (checkpoints + metrics.jsonl there); returns result and metrics."""
    # the tiny run with one optimizer update per step (mini-batch = the step's 4 prompts), micro-batches
    # of 16 and a large learning rate, so that two steps move the loss
    settings = {
        **TINY_CPU,
        "data.seed": 0,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 16,
        "actor_rollout_ref.actor.optim.lr": 1e-3,
        "reward.custom_reward_function.path": PARITY_REWARD,
        "reward.custom_reward_function.name": "compute_score",
    }
    spec = tiny_run(
        "copo_cpu",
        model=ws / "tiny",
        train_files=ws / "train.parquet",
        val_files=ws / "val.parquet",
        settings=settings,
        steps=steps,
        checkpoints=out / "ckpt",
        metrics=out / "metrics.jsonl",
        extra=tuple(extra),
    )
    overrides = spec.argv()
    result = run_module(
        "recipe.copo.main_copo", overrides, log_path=out / f"train-{steps}.log", timeout=RUN_TIMEOUT_S
    )
    metrics_path = out / "metrics.jsonl"
    return result, (read_jsonl(metrics_path) if metrics_path.is_file() else [])


def _assert_ok(result: RunResult) -> None:
    assert result.returncode == 0, (
        f"trainer exited {result.returncode}; log {result.log_path}:\n"
        + "\n".join(result.log.splitlines()[-60:])
    )


def _by_step(rows: list[dict]) -> dict[int, dict]:
    return {int(r["step"]): r for r in rows if "actor/pg_loss" in r}


@pytest.fixture(scope="module")
def smoke(workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult, list[dict]]:
    out = tmp_path_factory.mktemp("smoke")
    result, rows = copo_cpu_run(
        workspace,
        out,
        steps=2,
        extra=[
            "algorithm.copo.blend_mode=soft_with_zero",
            "actor_rollout_ref.actor.use_kl_loss=true",  # exercises the FSDP2 reference model too
            # recompute the old log-probs (copo_cpu.yaml reuses the rollout's) so the agreement that
            # justifies reusing them is checked in the real trainer: rollout_probs_diff_max below
            "algorithm.rollout_correction.bypass_mode=false",
            "trainer.save_freq=1",
        ],
    )
    return out, result, rows


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_copo_two_steps_on_cpu(smoke) -> None:
    out, result, rows = smoke
    _assert_ok(result)
    steps = _by_step(rows)
    assert sorted(steps) == [1, 2], f"steps logged: {sorted(steps)}"
    for step, row in steps.items():
        grad_norm = row["actor/grad_norm"]
        assert math.isfinite(grad_norm) and grad_norm > 0, f"step {step}: grad_norm {grad_norm}"
        copo = {k: v for k, v in row.items() if k.startswith("copo/")}
        assert copo, f"step {step}: no copo/ metrics in {sorted(row)}"
        bad = {k: v for k, v in copo.items() if v is None or not math.isfinite(v)}
        assert not bad, f"step {step}: non-finite copo metrics {bad}"
        # the hf rollout's log-probs agree with the FSDP actor's recomputation (fp32 both sides)
        assert row["training/rollout_probs_diff_max"] < 1e-3
    assert (out / "ckpt" / "global_step_2" / "actor").is_dir()
    assert (out / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_one_rank_checkpoint_merges_with_verl_model_merger(smoke, workspace: Path, tmp_path: Path) -> None:
    """One trainer rank trains unwrapped (cpu_backend.unwrapped_single_rank); its checkpoint must
    still be the layout verl's model merger (and scripts/evaluate.py) reads."""
    import torch
    from transformers import AutoModelForCausalLM

    from recipe.evaluation.checkpoints import discover_models, resolve_hf_path

    out, result, _ = smoke
    _assert_ok(result)
    actor = out / "ckpt" / "global_step_2" / "actor"
    saved = torch.load(actor / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    spec = discover_models([str(actor.parent)])[0]
    merged = AutoModelForCausalLM.from_pretrained(
        resolve_hf_path(spec, tmp_path, log=lambda m: None), dtype=torch.float32
    ).state_dict()
    initial = AutoModelForCausalLM.from_pretrained(workspace / "tiny", dtype=torch.float32).state_dict()
    assert merged.keys() == initial.keys()
    changed = 0
    for key, value in merged.items():
        # the merger stores bf16: compare at bf16 precision
        torch.testing.assert_close(value, saved[key].to(torch.bfloat16).float(), rtol=0, atol=0)
        changed += not torch.equal(value, initial[key].to(torch.bfloat16).float())
    assert changed > len(merged) // 2, (
        f"only {changed} of {len(merged)} tensors differ from the initial model"
    )


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_resume_continues_at_step_three(smoke, workspace: Path) -> None:
    out, first, first_rows = smoke
    _assert_ok(first)
    result, rows = copo_cpu_run(
        workspace,
        out,
        steps=3,
        extra=["algorithm.copo.blend_mode=soft_with_zero", "trainer.save_freq=1", "trainer.resume_mode=auto"],
    )
    _assert_ok(result)
    assert "global_step_2" in result.log, "the second run did not load the step-2 checkpoint"
    steps = _by_step(rows)
    assert sorted(steps) == [1, 2, 3], f"steps in metrics.jsonl after resume: {sorted(steps)}"
    # steps 1-2 are the first run's lines, untouched; only step 3 was trained again
    assert steps[1] == _by_step(first_rows)[1] and steps[2] == _by_step(first_rows)[2]
    assert (out / "ckpt" / "global_step_3" / "actor").is_dir()
    assert (out / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


@pytest.mark.timeout(2 * RUN_TIMEOUT_S + 60)
def test_copo_local_only_equals_verl_grpo(workspace: Path, tmp_path: Path) -> None:
    """blend_mode=local_only is plain GRPO: same seed, same rollouts, same loss and gradient.

    On-policy (ratio 1) the loss value is -mean(advantage), which is 0 for both whenever the
    responses have equal lengths (the tiny model rarely stops before max length), so the
    gradient norm is the comparison that can tell two losses apart.
    """
    common = ["actor_rollout_ref.actor.loss_agg_mode=token-mean", "trainer.save_freq=-1"]
    copo, copo_rows = copo_cpu_run(
        workspace, tmp_path / "copo", steps=1, extra=[*common, "algorithm.copo.blend_mode=local_only"]
    )
    grpo, grpo_rows = copo_cpu_run(
        workspace,
        tmp_path / "grpo",
        steps=1,
        extra=[
            *common,
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
        ],
    )
    _assert_ok(copo)
    _assert_ok(grpo)
    a, b = _by_step(copo_rows)[1], _by_step(grpo_rows)[1]
    # same sampled responses (seeded rollout), so the comparison is about the loss alone
    assert a["critic/score/mean"] == b["critic/score/mean"]
    assert a["response_length/mean"] == b["response_length/mean"]
    assert 0.0 < a["critic/score/mean"] < 1.0, "all-equal rewards would make both advantages 0"
    assert a["actor/grad_norm"] > 1e-4, "vacuous comparison: no gradient"
    assert a["actor/grad_norm"] == pytest.approx(b["actor/grad_norm"], rel=1e-4)
    assert a["actor/pg_loss"] == pytest.approx(b["actor/pg_loss"], abs=1e-6)
    # signal/ metrics are logged for verl's estimator too, and agree with the COPO ones. With
    # binary rewards and equal group sizes, GRPO's advantage is zero exactly on the responses
    # of zero-variance groups.
    for row in (a, b):
        assert row["signal/frac_nonzero_adv"] == pytest.approx(1.0 - row["signal/frac_groups_zero_variance"])
        assert row["signal/num_responses"] == 16.0 and row["signal/num_groups"] == 4.0
    assert a["signal/frac_nonzero_adv"] == pytest.approx(a["copo/frac_nonzero_adv"])
    assert a["signal/frac_groups_zero_variance"] == b["signal/frac_groups_zero_variance"]


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_dapo_group_filtering_keeps_only_groups_with_signal(workspace: Path, tmp_path: Path) -> None:
    """verl's filter_groups (DAPO) on the reward's ``acc`` through our trainer: every group that
    reaches the update has mixed outcomes, so every response carries a GRPO advantage."""
    result, rows = copo_cpu_run(
        workspace,
        tmp_path / "dapo",
        steps=2,
        extra=[
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
            "algorithm.filter_groups.enable=true",
            "algorithm.filter_groups.metric=acc",
            "algorithm.filter_groups.max_inflight_gen_batches=2",
            "trainer.save_freq=-1",
        ],
    )
    _assert_ok(result)
    steps = _by_step(rows)
    assert sorted(steps) == [1, 2]
    for row in steps.values():
        assert row["signal/frac_groups_zero_variance"] == 0.0
        assert row["signal/frac_nonzero_adv"] == 1.0
        assert row["signal/num_groups"] == 4.0
