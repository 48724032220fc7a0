"""Cost of GCPO's advantage per training step on this machine (CPU by default).

Cases (issue 7): P prompts x 8 responses (exact Shapley, 2^8 subsets per group) and
P x 16 responses (Monte Carlo, ``--permutations`` per group), each with embedding excluded
(random 384-d unit vectors, the MiniLM width) and included (the real embedder on
synthetic math-style responses). Target: exact Shapley for G=8 across 512 groups < 1 s.

    python scripts/bench_gcpo.py                       # full sizes, MiniLM
    python scripts/bench_gcpo.py --embedder hash --repeats 1
    python scripts/bench_gcpo.py --embed-limit 512     # embed 512 texts, scale to the batch (marked)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from copo_core.gcpo import compute_gcpo_advantages
from recipe.copo.embedders import make_embedder

EXACT_G = 8
MONTE_CARLO_G = 16
TARGET_S = 1.0


def synthetic_responses(n: int, seed: int) -> list[str]:
    """Math-solution-like texts of a few hundred words (MiniLM truncates at 256 word pieces)."""
    rng = random.Random(seed)
    steps = [
        "First we expand the product and collect like terms.",
        "Substituting x = {a} into the equation gives {b}.",
        "By the quadratic formula the roots are {a} and {b}.",
        "Dividing both sides by {a} we obtain {b}.",
        "The sum of the first {a} integers is {b}.",
        "We check the boundary case where the denominator is {a}.",
        "Therefore the remainder modulo {a} is {b}.",
    ]
    texts = []
    for _ in range(n):
        lines = [
            rng.choice(steps).format(a=rng.randint(1, 99), b=rng.randint(1, 999))
            for _ in range(rng.randint(8, 30))
        ]
        texts.append(" ".join(lines) + f" The answer is \\boxed{{{rng.randint(0, 50)}}}.")
    return texts


def make_batch(prompts: int, g: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    gen = torch.Generator().manual_seed(seed)
    n = prompts * g
    emb = torch.nn.functional.normalize(torch.randn(n, 384, generator=gen), dim=-1)
    rewards = (torch.rand(n, generator=gen) < 0.5).float()
    index = [i // g for i in range(n)]
    return emb, rewards, index


def time_advantage(emb, rewards, index, g: int, permutations: int, repeats: int) -> tuple[float, float]:
    """(min, median) seconds of compute_gcpo_advantages (exact when g <= 10, else Monte Carlo).

    The minimum is the cost without interference from other processes on a shared machine.
    """
    times = []
    for rep in range(repeats):
        start = time.perf_counter()
        compute_gcpo_advantages(emb, rewards, index, exact_max_g=10, num_permutations=permutations, seed=rep)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def time_embedding(embedder, texts: list[str], total: int) -> tuple[float, bool]:
    """Seconds to embed ``total`` texts; measured on ``texts`` and scaled when fewer (returns scaled flag)."""
    start = time.perf_counter()
    embedder.embed(texts)
    elapsed = time.perf_counter() - start
    return elapsed * total / len(texts), len(texts) < total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="bench_gcpo.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=512, help="prompts per step (default %(default)s)")
    parser.add_argument(
        "--permutations", type=int, default=64, help="Monte Carlo permutations for G=16 (default %(default)s)"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed repeats of the Shapley part (default %(default)s)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch intra-op threads (0 = torch's default) (default %(default)s)",
    )
    parser.add_argument(
        "--embedder", default="minilm", help="minilm | hash | local model path (default %(default)s)"
    )
    parser.add_argument(
        "--embed-batch-size", type=int, default=64, help="texts per embedder forward (default %(default)s)"
    )
    parser.add_argument(
        "--embed-limit",
        type=int,
        default=0,
        help="embed only this many texts and scale linearly (0 = all) (default %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    print(
        f"[bench_gcpo] torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"P={args.prompts}, embedder={args.embedder}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    embedder = make_embedder(args.embedder, args.embed_batch_size, device="cpu")
    embedder.embed(["warm-up"])  # first call pays one-off kernel set-up

    rows = []
    for g, label in ((EXACT_G, "exact"), (MONTE_CARLO_G, f"monte carlo, {args.permutations} perms")):
        emb, rewards, index = make_batch(args.prompts, g, seed=g)
        compute_gcpo_advantages(emb[: 4 * g], rewards[: 4 * g], index[: 4 * g])  # warm caches
        print(f"[bench_gcpo] G={g} ({label}): timing Shapley + advantage ...", flush=True)
        shapley_s, shapley_median = time_advantage(emb, rewards, index, g, args.permutations, args.repeats)
        n = args.prompts * g
        limit = args.embed_limit if 0 < args.embed_limit < n else n
        print(f"[bench_gcpo] G={g}: embedding {limit} of {n} texts ...", flush=True)
        embed_s, scaled = time_embedding(embedder, synthetic_responses(limit, seed=g), n)
        rows.append((g, label, n, shapley_s, shapley_median, embed_s, scaled))

    print()
    print(
        "| G | method | responses | GCPO excl. embedding, min / median (s) | embedding (s) "
        "| GCPO incl. embedding (s) |"
    )
    print("|---|---|---|---|---|---|")
    for g, label, n, shapley_s, shapley_median, embed_s, scaled in rows:
        mark = " (scaled)" if scaled else ""
        print(
            f"| {g} | {label} | {n} | {shapley_s:.3f} / {shapley_median:.3f} | {embed_s:.2f}{mark} "
            f"| {shapley_s + embed_s:.2f}{mark} |"
        )
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (timings on a shared machine grow with it)")
    exact_s = rows[0][3]
    verdict = "MET" if exact_s < TARGET_S else "MISSED"
    print(
        f"target (min of repeats): exact Shapley G={EXACT_G} x {args.prompts} groups < {TARGET_S:.0f} s -> {exact_s:.3f} s ({verdict})"
    )


if __name__ == "__main__":
    main()
