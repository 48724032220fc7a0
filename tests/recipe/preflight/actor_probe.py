"""One paper-config actor on CPU through verl's engine, in a fresh process (``recipe.preflight.actor``).

    python -m tests.recipe.preflight.actor_probe SPEC_JSON OUT_PT

SPEC_JSON: ``{"config": name, "model": dir, "overrides": [...], "negate": bool}``. The actor is built
as verl's worker builds it from the composed run config; on a fixed batch (old log-probs from the
actor's own log-prob pass, so the ratio starts at 1) it writes to OUT_PT: the log-prob pass's
response log-probs and entropy, the COPO loss per micro-batch and every weight's gradient, and the
log-softmax-family op calls of one update. ``negate`` flips the advantages (a run that must differ).

A process per actor: one default process group per process, and verl's fused kernels patch the
model class.
"""

from __future__ import annotations

import json
import sys

import torch


def run(spec: dict, out_path: str) -> None:
    from verl.workers.utils.padding import no_padding_2_padding

    from recipe.cpu_backend.activation import activate
    from recipe.preflight import measure
    from recipe.preflight.actor import Actor, Workload, make_batch, one_rank
    from recipe.preflight.run_config import run_config

    config, _ = run_config(spec["config"], spec["model"], spec["overrides"], flash_attn=False)
    activate(config)
    torch.manual_seed(0)
    with one_rank("cpu"):
        actor = Actor(config, "cpu")
        data = make_batch(Workload(8, (8, 24), (16, 48)), actor.vocab, actor.temperature)
        if spec.get("negate"):
            for key in ("advantages", "copo_local_adv"):
                data[key] = -data[key]
        data = actor.set_old_log_probs(data)
        _, inferred = actor.log_prob_pass(data)
        infer = {k: no_padding_2_padding(inferred[k], data) for k in ("log_probs", "entropy")}
        losses, grads = actor.gradients(data, "copo")
        ops = measure.count_log_softmax_ops(actor, data)
    torch.save(
        {
            "engine": type(actor.engine).__name__,
            "infer": infer,
            "losses": torch.tensor(losses),
            "grads": grads,
            "ops": {"calls": ops.calls, "tokens": ops.tokens, "micro_batches": ops.micro_batches},
        },
        out_path,
    )


if __name__ == "__main__":
    run(json.loads(sys.argv[1]), sys.argv[2])
