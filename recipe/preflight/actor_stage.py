"""The preflight's actor stage, in a process of its own (one process group, one CUDA context, and
verl's class-level model patches stay there):

    python -m recipe.preflight.actor_stage SPEC_JSON OUT_JSON

SPEC_JSON: ``{"config", "overrides", "shape", "models_root", "device", "sequences", "repeats", "tiny",
"flash_attn"}``, optionally ``"parity": false`` (``logprob_bench`` skips it). Builds the random-weight
model of ``shape`` (on the device: seconds for billions of weights) unless already built, then the
actor, and writes every measured number and the model's folder to OUT_JSON (read by
``recipe.preflight.cli``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import torch
from omegaconf import OmegaConf

from recipe.copo.throughput import attention_summary
from recipe.preflight import measure
from recipe.preflight.actor import Actor, Workload, make_batch, one_rank, tokens
from recipe.preflight.run_config import run_config

_DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}


def compute_dtype(config: Any) -> torch.dtype:
    """The dtype the actor's matmuls run in: FSDP's ``mixed_precision.param_dtype`` (verl: bf16)."""
    name = OmegaConf.select(
        config, "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", default="bf16"
    )
    return _DTYPES.get(str(name).lower(), torch.float32)


def settings(config: Any, actor: Actor, flash: bool) -> dict[str, Any]:
    """What the trainer would run with, as built (read back from the engine config)."""
    e = actor.engine_config
    model = config.actor_rollout_ref.model
    return {
        "engine": f"{type(actor.engine).__name__} ({e.strategy})",
        "attention": attention_summary(
            model.override_config.get("attn_implementation"), e.use_remove_padding, flash
        ),
        "fused_kernels": f"{e.use_fused_kernels} ({OmegaConf.select(model, 'fused_kernel_options.impl_backend')})",
        "micro_batches": (
            f"dynamic, {e.max_token_len_per_gpu} tokens (update) / {e.infer_max_token_len_per_gpu} (log-prob)"
            if e.use_dynamic_bsz
            else f"{e.micro_batch_size_per_gpu} sequences (update) / {e.infer_micro_batch_size_per_gpu} (log-prob)"
        ),
        "gradient_checkpointing": bool(model.get("enable_gradient_checkpointing", False)),
        "compute_dtype": str(compute_dtype(config)).removeprefix("torch."),
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import time

    from recipe.cpu_backend.roofline import matmul_params
    from recipe.preflight.model import build_random_model

    device = spec["device"]
    start = time.perf_counter()
    model_dir = str(build_random_model(spec["shape"], spec["models_root"], device=device))
    model_s = time.perf_counter() - start
    if device == "cuda":
        torch.cuda.empty_cache()
    config, _ = run_config(spec["config"], model_dir, spec["overrides"], flash_attn=spec["flash_attn"])
    if device == "cpu":
        from recipe.cpu_backend.activation import activate

        activate(config)
    dtype = compute_dtype(config)
    peak = measure.matmul_peak_tflops(device, dtype)
    torch.manual_seed(0)
    with one_rank(device):
        actor = Actor(config, device)
        workload = Workload.for_config(config, spec["sequences"], tiny=spec["tiny"])
        data = actor.set_old_log_probs(make_batch(workload, actor.vocab, actor.temperature))
        half = actor.set_old_log_probs(
            make_batch(
                Workload(workload.sequences // 2, workload.prompt_range, workload.response_range),
                actor.vocab,
                actor.temperature,
            )
        )
        parity = measure.parity(actor, data, dtype) if spec.get("parity", True) else None
        ops = measure.count_log_softmax_ops(actor, data)
        speed = measure.speed(actor, data, half, spec["repeats"], matmul_params(model_dir), peak)
        out = {
            "model_dir": model_dir,
            "model_s": model_s,
            "params": sum(p.numel() for p in actor.engine.module.parameters()),
            "matmul_params": matmul_params(model_dir),
            "settings": settings(config, actor, spec["flash_attn"]),
            "build_s": actor.build_s,
            "sequences": workload.sequences,
            "tokens": tokens(data),
            "parity": {**asdict(parity), "ok": parity.ok} if parity else None,
            "ops": {**asdict(ops), "per_token": ops.per_token, "loop": ops.loop},
            "speed": {
                **{k: v for k, v in asdict(speed).items() if k != "samples"},
                "tokens_per_s": speed.tokens_per_s,
                "mfu": speed.mfu,
                "copo_over_vanilla": speed.copo_over_vanilla,
            },
        }
    return out


if __name__ == "__main__":
    result = run(json.loads(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(result, f, indent=2)
