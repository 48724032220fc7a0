"""Benchmark recipe/reward/__init__.py: scoring throughput and hostile-input timings. Prints numbers, asserts nothing.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_reward.py --n 2000 --procs 2

Workloads (each response is ~2 KB of reasoning text ending in a boxed answer; pairs are distinct):
  exact     the boxed answer normalises to the gold string (in-process, no worker)
  numeric   fractions vs decimals, right or wrong (in-process exact rationals, no worker)
  symbolic  sqrt / sets / polynomials / pi / interval unions, right or wrong: math-verify in the worker pool
  mixed     50% exact, 25% numeric, 25% symbolic
Throughput is measured for compute_score_batch (parallel over --procs worker processes) and for
sequential compute_score calls (first 300); worker start-up is excluded (the pool is warmed first).
The verdict cache is off except in the "mixed +cache" row (pairs are distinct, so it mostly shows the
cache's overhead; real batches repeat answers within a group and across epochs).
"""

from __future__ import annotations

import argparse
import os
import random
import time

from recipe import reward

FILLER = "Let me work through this carefully. We simplify each term and combine the results. " * 24


def _symbolic(rng: random.Random) -> tuple[str, str, str]:
    """(gold, equivalent surface form, wrong answer) that only math-verify can decide; random ints keep
    the pairs distinct so neither the cache nor the in-batch de-duplication helps."""
    a, b, k, m = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
    kind = rng.randrange(5)
    if kind == 0:
        return f"{k}\\sqrt{{{m}}}", f"\\sqrt{{{k * k * m}}}", f"{k + 1}\\sqrt{{{m}}}"
    if kind == 1:
        return f"\\{{{a},{b + 100}\\}}", f"\\{{{b + 100},{a}\\}}", f"\\{{{a},{b + 101}\\}}"
    if kind == 2:
        return f"x^2+{2 * a}x+{a * a}", f"(x+{a})^2", f"x^2+{a * a}"
    if kind == 3:
        return f"\\frac{{\\pi}}{{{a}}}", f"\\frac{{2\\pi}}{{{2 * a}}}", f"\\frac{{\\pi}}{{{a + 1}}}"
    union = f"(-\\infty,{a})\\cup({a + b},\\infty)"
    return union, f"({a + b},\\infty)\\cup(-\\infty,{a})", f"(-\\infty,{a}]\\cup({a + b},\\infty)"


def _numeric(rng: random.Random) -> tuple[str, str, str]:
    """(gold, equivalent surface form, wrong answer) decided in-process as exact rationals."""
    a, b = rng.randint(1, 999), rng.choice([2, 4, 5, 8, 10])
    return f"\\frac{{{a * 3}}}{{{b * 3}}}", str(a / b), str(rng.randint(1000, 9999))


def make_workload(kind: str, n: int, seed: int) -> tuple[list[str], list[str], list[float]]:
    """``kind``: exact (pred normalises to the gold string), numeric, symbolic, or mixed
    (50% exact, 25% numeric, 25% symbolic; each non-exact one right or wrong with equal odds)."""
    rng = random.Random(seed)
    sols, golds, labels = [], [], []
    for _ in range(n):
        k = kind
        if kind == "mixed":
            u = rng.random()
            k = "exact" if u < 0.5 else "numeric" if u < 0.75 else "symbolic"
        gold, equivalent, wrong = _numeric(rng) if k == "numeric" else _symbolic(rng)
        ans = gold.replace("\\frac", "\\dfrac") if k == "exact" else rng.choice([equivalent, wrong])
        labels.append(0.0 if ans == wrong else 1.0)
        sols.append(f"{FILLER}\nSo the final answer is $\\boxed{{{ans}}}$.")
        golds.append(gold)
    return sols, golds, labels


def bench_throughput(kind: str, n: int, procs: int, timeout_s: float) -> tuple[float, float, float]:
    """(batch responses/s, sequential responses/s, share of batch scores equal to the labels)."""
    sols, golds, labels = make_workload(kind, n, seed=0)
    reward.clear_cache()
    t0 = time.perf_counter()
    outs = reward.compute_score_batch(["bench"] * n, sols, golds, num_procs=procs, timeout_s=timeout_s)
    batch = n / (time.perf_counter() - t0)
    agree = sum(o["score"] == y for o, y in zip(outs, labels, strict=True)) / n
    m = min(n, 300)
    t0 = time.perf_counter()
    reward.clear_cache()
    for s, g in zip(sols[:m], golds[:m], strict=True):
        reward.compute_score("bench", s, g, num_procs=procs, timeout_s=timeout_s)
    sequential = m / (time.perf_counter() - t0)
    return batch, sequential, agree


HOSTILE = {
    "code injection": ("\\boxed{__import__('os').system('echo pwned')}", "5"),
    "huge exponent 9^{9^{9^9}}": ("\\boxed{9^{9^{9^9}}}", "1"),
    "tower 2^2^2^2^2^100": ("\\boxed{2^{2^{2^{2^{2^{100}}}}}}", "1"),
    "1 MB of '{'": ("{" * (1 << 20), "1"),
    "1 MB '\\boxed{' unbalanced": ("\\boxed{" + "{" * (1 << 20), "1"),
    "131k x '\\boxed{'": ("\\boxed{" * (1 << 17), "1"),
    "1 MB of digits": ("1" * (1 << 20), "1"),
    "lone surrogates": ("\ud800\\boxed{3}\udfff", "3"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="responses per workload")
    ap.add_argument("--procs", type=int, default=2, help="worker processes")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-call limit, seconds")
    args = ap.parse_args()

    print(f"warming {args.procs} worker processes ...", flush=True)
    t0 = time.perf_counter()
    # a symbolic pair (numbers are decided in-process and would not start the pool)
    reward.compute_score_batch(
        ["w"] * args.procs,
        ["\\boxed{\\sqrt{8}}"] * args.procs,
        ["2\\sqrt{2}"] * args.procs,
        num_procs=args.procs,
    )
    print(f"pool start-up: {time.perf_counter() - t0:.2f} s")

    print(f"\nthroughput, {args.n} responses, {args.procs} processes (responses/s)")
    print(f"{'workload':<16} {'batch':>10} {'sequential':>11} {'labels ok':>10}")
    for kind, cache in (
        ("exact", "0"),
        ("numeric", "0"),
        ("symbolic", "0"),
        ("mixed", "0"),
        ("mixed", "65536"),
    ):
        os.environ["COPO_REWARD_CACHE_SIZE"] = cache
        batch, seq, agree = bench_throughput(kind, args.n, args.procs, args.timeout)
        label = kind + (" +cache" if cache != "0" else "")
        print(f"{label:<16} {batch:>10.0f} {seq:>11.0f} {agree:>10.1%}", flush=True)
    os.environ["COPO_REWARD_CACHE_SIZE"] = "0"

    print(f"\nhostile inputs (timeout {args.timeout:g} s; a timed-out worker is killed and replaced)")
    reward.reset_reward_metrics()
    for name, (sol, gold) in HOSTILE.items():
        t0 = time.perf_counter()
        out = reward.compute_score("bench", sol, gold, num_procs=args.procs, timeout_s=args.timeout)
        dt = time.perf_counter() - t0
        print(f"  {name:<30} {dt:7.3f} s  score={out['score']} timeout={out['timeout']}", flush=True)
    # parallelism check that does not depend on machine load: hanging requests are killed at the limit
    # wall-clock, so --procs of them in one batch take about one limit if the workers run in parallel.
    # First let the workers replaced after the timeouts above finish starting (not part of the check).
    reward.compute_score_batch(
        ["w"] * args.procs,
        ["\\boxed{\\sqrt{" + str(8 + 4 * i) + "}}" for i in range(args.procs)],
        ["2\\sqrt{2}"] * args.procs,
        num_procs=args.procs,
    )
    t0 = time.perf_counter()
    outs = reward.compute_score_batch(
        ["bench"] * args.procs,
        ["\\boxed{" + str(9 + i) + "^{9^{9^9}}}" for i in range(args.procs)],  # distinct: no de-dup
        ["1"] * args.procs,
        num_procs=args.procs,
        timeout_s=args.timeout,
    )
    print(
        f"  {args.procs} hanging inputs in one batch  {time.perf_counter() - t0:7.3f} s  "
        f"timeouts={sum(o['timeout'] for o in outs)} (parallel: about one limit, serial: {args.procs} limits)"
    )
    print(f"metrics: {reward.reward_metrics()}")
    reward.shutdown_pool()


if __name__ == "__main__":
    main()
