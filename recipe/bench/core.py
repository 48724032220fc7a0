"""Time copo_core against verl 0.9.1's estimators and vanilla policy loss; print the ratios.

    .venv/bin/python scripts/bench_core.py                  # full size (2,048 prompts x 8, L = 1,024)
    .venv/bin/python scripts/bench_core.py --prompts 256 --length 256 --repeats 3   # quick

Advantages: ``compute_copo_advantages`` (answer hashing included: uids and answers are
Python strings, as verl's ``uid`` object array and the reward function's answers) against
verl's ``grpo_vectorized`` and its default loop ``grpo`` estimator on the same uid array.
Loss: ``copo_policy_loss`` (two clipped surrogates) against ``compute_policy_loss_vanilla``,
forward only and forward + backward. Median of ``--repeats`` after one warm-up call.
Targets (issue 2): advantages <= 3x grpo_vectorized and >= 5x faster than loop grpo;
loss <= 2.2x vanilla.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable

import numpy as np
import torch
from omegaconf import OmegaConf

from copo_core import compute_copo_advantages, copo_policy_loss


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: allocator, lazy init
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_batch(prompts: int, group: int, length: int, seed: int) -> dict[str, object]:
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    n = prompts * group
    uids = np.array([str(uuid.UUID(int=int(rng.integers(2**62)))) for _ in range(prompts)], dtype=object)
    index = np.repeat(uids, group)
    scores = (torch.rand(n, generator=gen) < 0.4).float()
    answers = [str(int(x)) for x in rng.integers(0, 4, size=n)]
    mask = torch.ones(n, length)
    lengths = torch.randint(length // 4, length + 1, (n,), generator=gen)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    old = -torch.rand(n, length, generator=gen) * 3.0
    new = old + 0.1 * torch.randn(n, length, generator=gen)
    return {"index": index, "scores": scores, "answers": answers, "mask": mask, "old": old, "new": new}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="bench_core.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=2048, help="prompts per batch (default %(default)s)")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt (default %(default)s)")
    parser.add_argument("--length", type=int, default=1024, help="response tokens (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats (default %(default)s)")
    parser.add_argument(
        "--loop-repeats", type=int, default=3, help="repeats of verl's slow loop grpo (default %(default)s)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default %(default)s)")
    parser.add_argument(
        "--loss-agg-mode", default="seq-mean-token-mean", help="verl loss aggregation (default %(default)s)"
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    # Keep verl's group helpers on CPU (they pick CUDA when present and unforced).
    os.environ.setdefault("VERL_FORCE_DEVICE", "cpu")
    from verl.trainer.ppo.core_algos import (
        compute_grpo_outcome_advantage,
        compute_grpo_vectorized_outcome_advantage,
        compute_policy_loss_vanilla,
    )

    n = args.prompts * args.group
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, N = {n} ({args.prompts} x {args.group})"
    )
    batch = make_batch(args.prompts, args.group, args.length, seed=0)
    index, scores, answers = batch["index"], batch["scores"], batch["answers"]
    # verl's estimators take (N, L) token rewards; outcome reward on the last token, L = 1
    # keeps their extra work (sum over L, broadcast to the mask) negligible.
    token_rewards = scores.unsqueeze(-1)
    token_mask = torch.ones_like(token_rewards)

    t_copo = median_seconds(
        lambda: compute_copo_advantages(scores, index, answers, blend_mode="soft_with_zero"), args.repeats
    )
    t_vec = median_seconds(
        lambda: compute_grpo_vectorized_outcome_advantage(token_rewards, token_mask, index), args.repeats
    )
    t_loop = median_seconds(
        lambda: compute_grpo_outcome_advantage(token_rewards, token_mask, index), args.loop_repeats
    )
    print(
        f"advantages  copo {t_copo * 1e3:8.2f} ms | grpo_vectorized {t_vec * 1e3:8.2f} ms | grpo (loop) {t_loop * 1e3:8.2f} ms"
    )
    print(f"  copo / grpo_vectorized = {t_copo / t_vec:.2f}x (target <= 3x)")
    print(f"  grpo loop / copo       = {t_loop / t_copo:.1f}x faster (target >= 5x)")

    adv = compute_copo_advantages(scores, index, answers)
    old, new, mask = batch["old"], batch["new"], batch["mask"]
    config = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.2,
            "clip_ratio_c": 3.0,
            "global_batch_info": {},
        }
    )
    adv_tok = adv.blended.unsqueeze(-1) * mask
    mode = args.loss_agg_mode

    def copo_fwd(logp: torch.Tensor) -> torch.Tensor:
        return copo_policy_loss(
            old, logp, adv.local_adv, adv.global_adv, adv.local_weight, mask, loss_agg_mode=mode
        )[0]

    def vanilla_fwd(logp: torch.Tensor) -> torch.Tensor:
        return compute_policy_loss_vanilla(old, logp, adv_tok, mask, loss_agg_mode=mode, config=config)[0]

    def with_backward(fwd: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            logp = new.clone().requires_grad_(True)
            fwd(logp).backward()

        return run

    print(f"loss on ({n} x {args.length}) log-probs, loss_agg_mode={mode}")
    with torch.no_grad():
        t_cl = median_seconds(lambda: copo_fwd(new), args.repeats)
        t_vl = median_seconds(lambda: vanilla_fwd(new), args.repeats)
    print(
        f"  forward            copo {t_cl * 1e3:8.1f} ms | vanilla {t_vl * 1e3:8.1f} ms | ratio {t_cl / t_vl:.2f}x"
    )
    t_clb = median_seconds(with_backward(copo_fwd), args.repeats)
    t_vlb = median_seconds(with_backward(vanilla_fwd), args.repeats)
    print(
        f"  forward + backward copo {t_clb * 1e3:8.1f} ms | vanilla {t_vlb * 1e3:8.1f} ms | ratio {t_clb / t_vlb:.2f}x"
        " (target <= 2.2x)"
    )


if __name__ == "__main__":
    main()
