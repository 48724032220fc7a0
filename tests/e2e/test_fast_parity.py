"""The fast study trainer (recipe/study/fast) against verl's real trainer, on one captured step.

A tiny testbed v2 policy trains one step through ``python -m recipe.copo.main_copo --config-name
testbed2_cpu`` per method (GRPO, COPO soft_with_zero). The run saves the batch its actor trains on
(``trainer.batch_dump_dir``), its metrics and, with plain SGD (``optim.optimizer=SGD``, no momentum,
no weight decay), a checkpoint whose weights are ``w0 - lr * clip(g)``: the gradient verl's actor
applied, clipped by verl's rule. The test replays the captured batch through the fast trainer's
functions from the same initial weights and compares:

* advantages (and COPO's local/global advantage and weight): bitwise equal;
* the response tokens' log-probs (fast: one padded forward; verl: the rollout's, sampled with a KV
  cache, reused as old log-probs): within 1e-5;
* the policy loss and the gradient norm before clipping (verl's ``actor/pg_loss``,
  ``actor/grad_norm``): relative difference <= 1e-5 (GRPO's loss at ratio 1 is ~0: absolute 1e-7);
* the applied gradient, every weight: max |difference| <= 1e-5 x max |gradient|.

The differences seen are ~1e-6 (float rounding of the packed vs padded forward); the test prints
them (``pytest -s``).

verl splits the batch into two micro-batches (``ppo_micro_batch_size_per_gpu=8`` of 16 responses)
and packs them without padding (``use_remove_padding``); the fast trainer takes one padded batch.
The reward is tests/e2e/parity_reward.py (response-length parity), so groups are mixed and both of
COPO's loss terms are non-zero. About 4 minutes on 2 cores (the two runs share them).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from recipe.copo.config_check import compose_and_validate
from recipe.copo.fields import COPO_FIELDS
from recipe.models.tiny import ModelShape
from recipe.study.fast.settings import FastSettings
from recipe.study.fast.update import UpdateBatch, compute_advantages, policy_loss, response_log_probs
from recipe.study.methods import METHODS
from recipe.study.testbed import build as testbed_build
from recipe.study.testbed.mixed import MixedTaskSpec
from recipe.study.testbed.sft import SFTSpec
from tests.e2e.cpu_run import PARITY_REWARD, REPO_ROOT, cpu_env, read_jsonl

pytestmark = pytest.mark.e2e

TINY_V2 = testbed_build.TestbedSpec(
    task=MixedTaskSpec(train_per_task=32, val_per_task=8),
    model=ModelShape(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64),
    sft=SFTSpec(steps=60, batch_size=32, warmup_steps=5),
)
LR = 10.0  # SGD: the weight change is 10 x the clipped gradient, far above the weights' rounding
PARITY_METHODS = ("grpo", "copo_soft_with_zero")
LOG_PROB_ATOL = 1e-5
REL_TOL = 1e-5


def run_overrides(testbed: testbed_build.Testbed, method: str, out: Path) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={testbed.model}",
        f"data.train_files={testbed.data / 'train.parquet'}",
        f"data.val_files={testbed.data / 'val.parquet'}",
        "data.seed=0",
        "actor_rollout_ref.rollout.seed=0",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        f"reward.custom_reward_function.path={PARITY_REWARD}",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=1",
        f"trainer.default_local_dir={out / 'ckpt'}",
        f"trainer.metrics_jsonl={out / 'metrics.jsonl'}",
        f"trainer.batch_dump_dir={out / 'dump'}",
        "actor_rollout_ref.actor.optim.optimizer=SGD",
        f"actor_rollout_ref.actor.optim.lr={LR}",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        *METHODS[method],
    ]


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Both methods' one-step main_copo runs (in parallel): method -> (run folder, overrides)."""
    root = tmp_path_factory.mktemp("fast_parity")
    testbed = testbed_build.ensure_testbed(TINY_V2, root=root / "cache")
    runs, procs = {}, []
    for method in PARITY_METHODS:
        out = root / method
        out.mkdir()
        overrides = run_overrides(testbed, method, out)
        cmd = [sys.executable, "-m", "recipe.copo.main_copo", "--config-name", "testbed2_cpu", *overrides]
        log = open(out / "train.log", "w")  # noqa: SIM115 - closed below
        procs.append(
            (
                method,
                log,
                subprocess.Popen(cmd, cwd=REPO_ROOT, env=cpu_env(), stdout=log, stderr=subprocess.STDOUT),
            )
        )
        runs[method] = (out, overrides)
    for method, log, proc in procs:
        try:
            rc = proc.wait(timeout=1200)
        finally:
            log.close()
        tail = (runs[method][0] / "train.log").read_text(errors="replace")[-3000:]
        assert rc == 0, f"{method}: main_copo exited {rc}\n{tail}"
    return runs


def padded_batch(dump: dict, pad_token_id: int) -> tuple[UpdateBatch, dict[str, torch.Tensor]]:
    """The dumped rows (verl's no-padding layout) as the fast trainer's padded batch, and the dumped
    per-token fields padded the same way."""
    prompts, responses = dump["prompts"], dump["responses"]
    n = len(responses)
    width_p, width_r = max(len(p) for p in prompts), max(len(r) for r in responses)
    input_ids = torch.full((n, width_p + width_r), pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        input_ids[i, width_p - len(p) : width_p] = p
        input_ids[i, width_p : width_p + len(r)] = r
        attention[i, width_p - len(p) : width_p + len(r)] = 1

    def pad(rows: list[torch.Tensor]) -> torch.Tensor:
        out = torch.zeros((n, width_r), dtype=torch.float32)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row.float()
        return out

    mask = pad(dump["response_mask"])
    assert torch.equal(mask, attention[:, width_p:].float()), (
        "response_mask is not the response's attention mask"
    )
    batch = UpdateBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
        response_mask=mask,
        old_log_probs=pad(dump["old_log_probs"]),
        scores=torch.stack([row.float().sum() for row in dump["rm_scores"]]),
        uids=[str(u) for u in dump["uid"]],
        preds=[info.get("pred") for info in dump["reward_extra_info"]],
    )
    fields = {name: pad(dump[name]) for name in ("advantages", *COPO_FIELDS) if name in dump}
    return batch, fields


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("method", PARITY_METHODS)
def test_fast_step_equals_verl_step(captured: dict[str, tuple[Path, list[str]]], method: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, overrides = captured[method]
    config = compose_and_validate(overrides, config_name="testbed2_cpu")
    settings = FastSettings.from_config(config)
    dump = torch.load(out / "dump" / "step_1.pt", weights_only=False)
    model_dir = str(config.actor_rollout_ref.model.path)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    batch, verl_fields = padded_batch(dump, int(tokenizer.pad_token_id))
    assert 0 < float(batch.scores.mean()) < 1, "the parity reward should give mixed groups"
    assert len({int(m.sum()) for m in batch.response_mask}) > 1, (
        "responses of one length only: no padding tested"
    )

    fast_fields = compute_advantages(batch, settings, global_step=1)
    expected = ("advantages", *COPO_FIELDS) if settings.estimator == "copo" else ("advantages",)
    for name in expected:
        assert torch.equal(fast_fields[name] * batch.response_mask, verl_fields[name]), name
    assert float(verl_fields["advantages"].abs().sum()) > 0

    model.train()
    log_prob = response_log_probs(model, batch, settings.temperature)
    diff = ((log_prob - batch.old_log_probs) * batch.response_mask).abs().max()
    assert float(diff) <= LOG_PROB_ATOL, f"log-probs differ from the rollout's by {float(diff):.2e}"

    loss, metrics = policy_loss(settings, batch, log_prob, fast_fields)
    verl_metrics = next(r for r in read_jsonl(out / "metrics.jsonl") if r["step"] == 1)
    assert float(loss) == pytest.approx(verl_metrics["actor/pg_loss"], rel=REL_TOL, abs=1e-7)
    if settings.estimator == "copo":
        for part in ("pg_loss_local", "pg_loss_global"):
            assert metrics[part] == pytest.approx(verl_metrics[f"actor/{part}"], rel=REL_TOL, abs=1e-7), part

    loss.backward()
    params = dict(model.named_parameters())
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params.values()]))
    assert float(norm) == pytest.approx(verl_metrics["actor/grad_norm"], rel=REL_TOL)
    clip = float(settings.actor.optim.clip_grad)
    coef = min(1.0, clip / (float(norm) + 1e-6))  # torch.nn.utils.clip_grad_norm_
    trained = torch.load(
        out / "ckpt" / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt", weights_only=False
    )
    worst, scale = 0.0, 0.0
    for name, param in params.items():
        applied = (param.detach() - trained[name].float()) / LR
        worst = max(worst, float((applied - coef * param.grad).abs().max()))
        scale = max(scale, float(applied.abs().max()))
    assert scale > 0
    print(
        f"\n[parity] {method}: log-probs {float(diff):.1e}, loss {float(loss):.6e} vs {verl_metrics['actor/pg_loss']:.6e}, "
        f"grad norm {float(norm):.6f} vs {verl_metrics['actor/grad_norm']:.6f}, gradients {worst:.1e} of {scale:.1e}"
    )
    assert worst <= REL_TOL * scale, f"gradients differ by {worst:.2e} (largest {scale:.2e})"
