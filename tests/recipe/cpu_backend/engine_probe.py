"""One COPO training step through verl's real actor engine, on one gloo rank, in a fresh process.

    python -m tests.recipe.cpu_backend.engine_probe SPEC_JSON OUT_PT

SPEC_JSON: ``{"model": dir, "unwrapped": bool, "remove_padding": bool, "response_logits": bool,
"adv_sign": 1 | -1}`` (the first booleans are ``cpu_backend.unwrapped_single_rank``,
``actor_rollout_ref.model.use_remove_padding`` and ``cpu_backend.response_logits_only``). The engine
is built as verl's actor worker builds it (``omega_conf_to_dataclass`` of copo_cpu.yaml's actor,
``EngineRegistry.new``); the batch is a mini-batch in verl's no-padding layout with COPO's per-token
fields, split into micro-batches of unequal lengths; the loss is the recipe's ``copo_ppo_loss``. Written
to OUT_PT: the engine class, whether the module is FSDP-wrapped, how many positions the LM head saw per
micro-batch, per-micro-batch losses, the gradient of every weight after forward/backward, the gradient
norm, every weight after the optimizer step, and the response tokens' log-probs and entropy from verl's
forward-only log-prob pass (``infer_batch``) on the updated weights.

A separate process per engine: ``torch.distributed`` allows one default process group per process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from functools import partial

import torch

PROMPT_LENS = [5, 9, 3, 7, 4, 8]
RESPONSE_LENS = [6, 2, 11, 4, 9, 3]
MICRO_BATCH = 3  # -> two micro-batches, each padded to its own longest sequence


def _batch(vocab: int, adv_sign: float):
    from verl.utils import tensordict_utils as tu

    gen = torch.Generator().manual_seed(0)
    rows = []
    for lp, lr in zip(PROMPT_LENS, RESPONSE_LENS, strict=True):
        prompt = torch.randint(3, vocab - 3, (lp,), generator=gen)
        response = torch.randint(3, vocab - 3, (lr,), generator=gen)
        local = torch.randn((), generator=gen).expand(lr).clone()
        glob = torch.randn((), generator=gen).expand(lr).clone()
        weight = torch.rand((), generator=gen).expand(lr).clone()
        rows.append(
            {
                "prompts": prompt,
                "responses": response,
                "input_ids": torch.cat([prompt, response]),
                "position_ids": torch.arange(lp + lr),
                "response_mask": torch.ones(lr, dtype=torch.int64),
                "loss_mask": torch.ones(lr, dtype=torch.int64),
                "old_log_probs": -torch.rand(lr, generator=gen) * 3 - 2,
                "advantages": adv_sign * (weight * local + (1 - weight) * glob),
                "copo_local_adv": adv_sign * local,
                "copo_global_adv": adv_sign * glob,
                "copo_local_weight": weight,
            }
        )
    data = tu.list_of_dict_to_tensordict(rows)
    lengths = [lp + lr for lp, lr in zip(PROMPT_LENS, RESPONSE_LENS, strict=True)]
    tu.assign_non_tensor(
        data,
        calculate_entropy=False,
        distillation_use_topk=False,
        distillation_only=False,
        global_batch_size=len(rows),
        temperature=0.7,
        global_token_num=lengths,
        update_lr_scheduler=False,
        disable_auto_offload=True,
    )
    return data


def run(spec: dict, out_path: str) -> None:
    from recipe.cpu_backend.activation import activate
    from recipe.cpu_backend.settings import RESPONSE_LOGITS, SETTINGS, UNWRAPPED

    os.environ[SETTINGS[UNWRAPPED]] = "1" if spec["unwrapped"] else "0"
    os.environ[SETTINGS[RESPONSE_LOGITS]] = "1" if spec["response_logits"] else "0"
    activate(None)
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.fsdp_utils import fsdp_version
    from verl.workers.engine import EngineRegistry

    from recipe.copo.actor_loss import copo_ppo_loss
    from recipe.copo.config_check import compose
    from recipe.launch import format_overrides

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
        config = compose(
            format_overrides(
                {
                    "actor_rollout_ref.model.path": spec["model"],
                    "data.train_files": "/unused",
                    "data.val_files": "/unused",
                    "algorithm.adv_estimator": "copo",
                    "actor_rollout_ref.actor.policy_loss.loss_mode": "copo",
                    "actor_rollout_ref.model.use_remove_padding": spec["remove_padding"],
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": MICRO_BATCH,
                }
            ),
            config_name="copo_cpu",
        )
        actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
        actor.model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        engine_config = actor.engine
        engine_config.micro_batch_size_per_gpu = MICRO_BATCH
        engine_config.use_remove_padding = spec["remove_padding"]
        engine_config.use_dynamic_bsz = False
        engine = EngineRegistry.new(
            model_type="language_model",
            backend=engine_config.strategy,
            model_config=actor.model_config,
            engine_config=engine_config,
            optimizer_config=actor.optim,
            checkpoint_config=actor.checkpoint,
        )
        engine.initialize()
        data = _batch(actor.model_config.hf_config.vocab_size, float(spec["adv_sign"]))
        tu.assign_non_tensor(
            data,
            use_remove_padding=spec["remove_padding"],
            use_dynamic_bsz=False,
            max_token_len_per_gpu=engine_config.max_token_len_per_gpu,
            micro_batch_size_per_gpu=MICRO_BATCH,
            use_fused_kernels=False,
        )

        def full(t: torch.Tensor) -> torch.Tensor:
            return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()

        with engine.train_mode():
            engine.optimizer_zero_grad()
            rows: list[int] = []  # positions the LM head computes logits for, per micro-batch
            hook = engine.module.lm_head.register_forward_hook(
                lambda m, i, o: rows.append(i[0].shape[:-1].numel())
            )
            out = engine.forward_backward_batch(
                data, partial(copo_ppo_loss, config=actor), forward_only=False
            )
            hook.remove()
            grads = {n: full(p.grad) for n, p in engine.module.named_parameters() if p.grad is not None}
            grad_norm = engine.optimizer_step()
        params = {n: full(p) for n, p in engine.module.named_parameters()}
        # verl's log-prob pass (no loss) with the token entropy, on the updated weights
        from verl.workers.utils.padding import no_padding_2_padding

        infer = _batch(actor.model_config.hf_config.vocab_size, float(spec["adv_sign"]))
        tu.assign_non_tensor(
            infer,
            calculate_entropy=True,
            use_remove_padding=spec["remove_padding"],
            use_dynamic_bsz=False,
            max_token_len_per_gpu=engine_config.max_token_len_per_gpu,
            micro_batch_size_per_gpu=MICRO_BATCH,
            use_fused_kernels=False,
        )
        with engine.eval_mode():
            inferred = engine.infer_batch(infer)["model_output"]
        response = {k: no_padding_2_padding(inferred[k], infer) for k in ("log_probs", "entropy")}
        torch.save(
            {
                "engine": type(engine).__name__,
                "fsdp_version": fsdp_version(engine.module),
                "losses": torch.tensor(out["loss"]),
                "lm_head_rows": rows,
                "grads": grads,
                "grad_norm": grad_norm,
                "params": params,
                "infer": response,
            },
            out_path,
        )
        dist.destroy_process_group()


if __name__ == "__main__":
    run(json.loads(sys.argv[1]), sys.argv[2])
