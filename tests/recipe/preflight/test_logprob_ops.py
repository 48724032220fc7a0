"""The paper configs' log-prob path: no per-token loop, same loss and gradients as verl's plain path.

Each actor runs in its own process (``actor_probe.py``): copo_qwen2.5_3b.yaml's actor, built as verl's
worker builds it, on a two-layer model with Qwen2.5's 151,936-token vocabulary, in fp32 so that the
comparisons can be tight:

* ``plain``: ``use_fused_kernels=false`` (verl's ``logprobs_from_logits``; without flash-attn its
  ``logprobs_from_logits_v2`` loops over the tokens) and fixed micro-batches of 4 sequences;
* ``fused``: the configs' ``use_fused_kernels`` with the torch backend, same micro-batches;
* ``fused_dynamic``: plus ``use_dynamic_bsz`` with a budget that splits the batch into several
  micro-batches (the configs' other throughput setting);
* ``plain_negated``: the advantages negated, so the comparisons can fail.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from recipe.preflight.measure import LOOP_OPS_PER_TOKEN
from recipe.preflight.model import build_random_model
from recipe.preflight.shapes import model_shape
from tests.paths import REPO

CONFIG = "copo_qwen2.5_3b"
FP32 = [
    "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
]
FIXED = [
    f"actor_rollout_ref.{k}=false" for k in ("actor.use_dynamic_bsz", "rollout.log_prob_use_dynamic_bsz")
]
MICRO = [
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
]
# sequences of at most 24 + 48 tokens (actor_probe's workload): a 150-token budget splits 8 of them
DYNAMIC = [
    "data.max_prompt_length=24",
    "data.max_response_length=48",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=150",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=150",
]
VARIANTS = {
    "plain": {"overrides": [*FP32, *FIXED, *MICRO, "actor_rollout_ref.model.use_fused_kernels=false"]},
    "fused": {"overrides": [*FP32, *FIXED, *MICRO]},
    "fused_dynamic": {"overrides": [*FP32, *DYNAMIC]},
    "plain_negated": {
        "overrides": [*FP32, *FIXED, *MICRO, "actor_rollout_ref.model.use_fused_kernels=false"],
        "negate": True,
    },
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("logprob_ops")
    model = build_random_model(model_shape("Qwen/Qwen2.5-3B-Instruct", tiny=True), root, dtype="float32")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    out = {}
    for name, spec in VARIANTS.items():
        path = root / f"{name}.pt"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.recipe.preflight.actor_probe",
                json.dumps({"config": CONFIG, "model": str(model), **spec}),
                str(path),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        out[name] = torch.load(path)
    return out


def test_the_paper_config_ships_the_fused_torch_path(tmp_path) -> None:
    from recipe.preflight.run_config import run_config

    model = build_random_model(model_shape("Qwen/Qwen2.5-3B-Instruct", tiny=True), tmp_path)
    config, _ = run_config(CONFIG, str(model), flash_attn=False)
    assert config.actor_rollout_ref.model.use_fused_kernels is True
    assert config.actor_rollout_ref.model.fused_kernel_options.impl_backend == "torch"


def test_plain_path_loops_per_token_and_the_fused_path_does_not(runs: dict[str, dict]) -> None:
    plain, fused, dynamic = (runs[k]["ops"] for k in ("plain", "fused", "fused_dynamic"))
    # verl's fallback: one log-softmax forward and one backward per token (the 2.0)
    assert plain["calls"] / plain["tokens"] >= 1.9
    for ops in (fused, dynamic):
        assert ops["tokens"] == plain["tokens"] > 400
        # verl's fused path: a few ops per 512-token chunk of each micro-batch
        chunks = ops["micro_batches"] * math.ceil(ops["tokens"] / ops["micro_batches"] / 512)
        assert ops["calls"] <= 12 * chunks, ops
        assert ops["calls"] / ops["tokens"] < LOOP_OPS_PER_TOKEN
    assert dynamic["micro_batches"] >= 3 and fused["micro_batches"] == 2


@pytest.mark.parametrize("variant", ["fused", "fused_dynamic"])
def test_same_log_probs_loss_and_gradients_as_verls_plain_path(runs: dict[str, dict], variant: str) -> None:
    ref, got = runs["plain"], runs[variant]
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(got["infer"][key], ref["infer"][key], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got["losses"].sum(), ref["losses"].sum(), rtol=1e-5, atol=1e-7)
    assert ref["grads"].keys() == got["grads"].keys()
    for name, grad in ref["grads"].items():
        torch.testing.assert_close(got["grads"][name], grad, rtol=1e-4, atol=1e-6)


def test_the_comparison_can_fail(runs: dict[str, dict]) -> None:
    ref, negated = runs["plain"], runs["plain_negated"]
    head = "lm_head.weight" if "lm_head.weight" in ref["grads"] else "model.embed_tokens.weight"
    scale = ref["grads"][head].abs().max()
    assert (negated["grads"][head] - ref["grads"][head]).abs().max() > 0.1 * scale
