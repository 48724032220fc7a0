"""Benchmark recipe/reward: agreement with labelled suites side by side with verl's scorers, throughput,
hostile-input timings. Prints numbers, asserts nothing.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_reward.py --n 2000 --procs 2
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_reward.py --suite-only --show-disagreements

Labelled suites (recipe/reward/suites/): ``math_verify_cases.json``, (response, ground truth, expected verdict)
triples derived from Math-Verify's own test cases (huggingface/Math-Verify ``tests/``, Apache-2.0; see
``make_math_verify_cases.py`` there), and ``dapo_format_cases.json``, responses in DAPO-Math-17k's
``Answer:`` format with hand-written labels. Every case is scored by ``recipe.reward`` and by verl 0.9.1's
``math_verify`` (Math-Verify with sympy ``parse_expr`` on model text), ``math_dapo`` (DAPO's ``Answer:``
reader) and ``math_reward`` (last ``\\boxed{}``, string match); each row prints the share of verdicts equal
to the label, on the Math-Verify cases, on their boxed-response subset and on the DAPO-format cases, the
false positives (expected 0, scored 1) and the scorer's sequential throughput over the suites
(responses/s; ours also batched over ``--procs`` workers; worker pools are warmed first).

Throughput workloads (each response is ~2 KB of reasoning text ending in a boxed answer; pairs are distinct):
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
import contextlib
import io
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from recipe import reward

SUITE_DIR = reward.SUITES_DIR  # package data: a bench reads nothing under tests/
SUITES = {"math-verify": "math_verify_cases.json", "dapo-format": "dapo_format_cases.json"}

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


@dataclass(frozen=True)
class Case:
    suite: str
    id: str
    response: str
    ground_truth: str
    expected: int

    @property
    def boxed(self) -> bool:
        return "\\boxed" in self.response or "\\fbox" in self.response


def load_suites() -> list[Case]:
    cases = []
    for suite, name in SUITES.items():
        data = json.loads((SUITE_DIR / name).read_text(encoding="utf-8"))
        cases += [
            Case(suite, c["id"], c["response"], c["ground_truth"], int(c["expected"])) for c in data["cases"]
        ]
    return cases


def _quiet(fn: Callable[[str, str], bool]) -> Callable[[str, str], bool]:
    """verl's math_reward / math_verify print parse errors to stdout: keep the table readable."""

    def call(response: str, gold: str) -> bool:
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(response, gold)

    return call


def verl_scorers() -> dict[str, Callable[[str, str], bool]]:
    """verl 0.9.1's math scorers as (response, ground truth) -> correct."""
    from verl.utils.reward_score import math_dapo, math_reward, math_verify

    return {
        "verl math_verify": _quiet(lambda r, g: float(math_verify.compute_score(r, g)) >= 1.0),
        "verl math_dapo": _quiet(lambda r, g: bool(math_dapo.compute_score(r, g)["acc"])),
        "verl math_reward": _quiet(lambda r, g: float(math_reward.compute_score(r, g)) >= 1.0),
    }


def _ours(procs: int, timeout_s: float) -> Callable[[str, str], bool]:
    return lambda r, g: reward.compute_score("suite", r, g, num_procs=procs, timeout_s=timeout_s)["acc"]


def _row(name: str, cases: list[Case], verdicts: list[bool], rate: str) -> str:
    def agree(sel: list[int]) -> str:
        ok = sum(verdicts[i] == bool(cases[i].expected) for i in sel)
        return f"{ok / len(sel):6.1%} ({ok}/{len(sel)})" if sel else "-"

    idx = range(len(cases))
    mv = [i for i in idx if cases[i].suite == "math-verify"]
    mv_boxed = [i for i in mv if cases[i].boxed]
    dapo = [i for i in idx if cases[i].suite == "dapo-format"]
    fp = [i for i in idx if verdicts[i] and not cases[i].expected]
    fp_dapo = sum(cases[i].suite == "dapo-format" for i in fp)
    return (
        f"{name:<22} {agree(mv):>17} {agree(mv_boxed):>17} {agree(dapo):>15} {agree(list(idx)):>17} "
        f"{len(fp):>4} ({fp_dapo} DAPO) {rate:>12}"
    )


def bench_suite(procs: int, timeout_s: float, show: bool) -> None:
    cases = load_suites()
    n_mv = sum(c.suite == "math-verify" for c in cases)
    print(
        f"\nlabelled suites: {n_mv} Math-Verify cases ({sum(c.boxed for c in cases if c.suite == 'math-verify')} "
        f"with a boxed response) + {len(cases) - n_mv} DAPO-format cases, from {SUITE_DIR}"
    )
    print(
        f"{'scorer':<22} {'Math-Verify':>17} {'MV boxed-only':>17} {'DAPO-format':>15} {'all':>17} "
        f"{'false positives':>15} {'responses/s':>12}"
    )
    scorers = {"recipe.reward": _ours(procs, timeout_s), **verl_scorers()}
    for name, fn in scorers.items():
        fn("\\boxed{\\sqrt{8}}", "2\\sqrt{2}")  # start worker pools outside the timed pass
        reward.clear_cache()
        t0 = time.perf_counter()
        verdicts = [bool(fn(c.response, c.ground_truth)) for c in cases]
        rate = f"{len(cases) / (time.perf_counter() - t0):.0f}"
        if name == "recipe.reward":
            reward.clear_cache()
            t0 = time.perf_counter()
            batch = reward.compute_score_batch(
                ["suite"] * len(cases),
                [c.response for c in cases],
                [c.ground_truth for c in cases],
                num_procs=procs,
                timeout_s=timeout_s,
            )
            rate += f" / {len(cases) / (time.perf_counter() - t0):.0f}b"
            assert [b["acc"] for b in batch] == verdicts, "batch and sequential verdicts differ"
        print(_row(name, cases, verdicts, rate), flush=True)
        if show:
            for c, v in zip(cases, verdicts, strict=True):
                if v != bool(c.expected):
                    kind = "FALSE POSITIVE" if v else "false negative"
                    print(
                        f"    {kind:<14} {c.id:<34} gold={c.ground_truth[:40]!r} response=...{c.response[-70:]!r}"
                    )
    print("(responses/s: sequential calls; '/ Nb': recipe.reward's compute_score_batch over --procs workers)")


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="bench_reward.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=2000, help="responses per workload (default %(default)s)")
    ap.add_argument("--procs", type=int, default=2, help="worker processes (default %(default)s)")
    ap.add_argument(
        "--timeout", type=float, default=5.0, help="per-call limit, seconds (default %(default)s)"
    )
    ap.add_argument("--suite-only", action="store_true", help="only the labelled suites vs verl's scorers")
    ap.add_argument("--show-disagreements", action="store_true", help="list every case a scorer gets wrong")
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (timings drift with load)")
    bench_suite(args.procs, args.timeout, args.show_disagreements)
    if args.suite_only:
        reward.shutdown_pool()
        return

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
