"""Scoring for the math reward (the public entry points are re-exported by ``recipe.reward``).

Scoring: extract and normalise the final answer (``recipe.reward.extract``: the last final-answer marker;
only the last 8 KB of a response is searched), then an in-process fast path (equal normalised strings score 1; two plain numbers --
integers, decimals, ``\\frac{a}{b}`` -- are compared as exact rationals, and only near-equal pairs
are left to math-verify), then a bounded LRU cache of earlier math-verify verdicts for the same (gold, pred)
pair, and otherwise math-verify in a killable worker process (``recipe.reward.pool``) with a per-call time
limit (default 5 s). A timeout scores 0, sets ``timeout=True`` and is counted in ``reward_metrics()``;
it never raises. Nothing from the model output is evaluated as code.

State (the worker pool, the verdict cache, the counters) is per process and lives in this module, so
``recipe.reward`` loaded through ``pkg://`` (as the recipe config does) or by file path shares it.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any

from recipe.reward.extract import extract_and_normalize, normalize_answer
from recipe.reward.pool import VerifyPool

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "compute_score",
    "compute_score_batch",
    "reward_metrics",
    "reset_reward_metrics",
    "clear_cache",
    "shutdown_pool",
]

DEFAULT_TIMEOUT_S = 5.0
_MAX_DEFAULT_PROCS = 8

_pool: VerifyPool | None = None
_pool_lock = threading.Lock()
_metrics_lock = threading.Lock()
_metrics = {
    "calls": 0,
    "exact_match": 0,
    "verify_calls": 0,
    "cache_hits": 0,
    "timeouts": 0,
    "no_answer": 0,
    "errors": 0,
}
# (gold, pred) -> math-verify verdict. A group of G responses often repeats an answer, and an epoch
# repeats prompts, so many pairs recur. Timeouts are never cached (they may be load-dependent).
_DEFAULT_CACHE_SIZE = 65536
_cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
_cache_lock = threading.Lock()


def _cache_size() -> int:
    return int(os.environ.get("COPO_REWARD_CACHE_SIZE", _DEFAULT_CACHE_SIZE))


def _cache_get(key: tuple[str, str]) -> bool | None:
    with _cache_lock:
        verdict = _cache.get(key)
        if verdict is not None:
            _cache.move_to_end(key)
        return verdict


def _cache_put(key: tuple[str, str], verdict: bool) -> None:
    limit = _cache_size()
    if limit <= 0:
        return
    with _cache_lock:
        _cache[key] = verdict
        _cache.move_to_end(key)
        while len(_cache) > limit:
            _cache.popitem(last=False)


def clear_cache() -> None:
    """Forget cached math-verify verdicts (size: env ``COPO_REWARD_CACHE_SIZE``, 0 disables)."""
    with _cache_lock:
        _cache.clear()


def _resolve_timeout(timeout_s: float | None) -> float:
    if timeout_s is None:
        timeout_s = float(os.environ.get("COPO_REWARD_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    timeout_s = float(timeout_s)
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s} (reward_kwargs.timeout_s)")
    return timeout_s


def _resolve_procs(num_procs: int | None) -> int:
    if num_procs is None:
        env = os.environ.get("COPO_REWARD_NUM_PROCS")
        num_procs = int(env) if env else min(os.cpu_count() or 1, _MAX_DEFAULT_PROCS)
    num_procs = int(num_procs)
    if num_procs < 1:
        raise ValueError(f"num_procs must be >= 1, got {num_procs} (reward_kwargs.num_procs)")
    return num_procs


def _get_pool(num_procs: int | None) -> VerifyPool:
    """The process-wide pool, (re)created when the requested size changes."""
    global _pool
    size = _resolve_procs(num_procs)
    with _pool_lock:
        if _pool is None or _pool.size != size:
            if _pool is not None:
                _pool.close()
            _pool = VerifyPool(size)
        return _pool


def shutdown_pool() -> None:
    """Kill the worker processes now (they are also killed at interpreter exit)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.close()
        _pool = None


def reward_metrics() -> dict[str, int]:
    """Counters since start (or the last reset).

    ``calls`` responses scored; ``exact_match`` decided equal in-process (same string or same rational);
    ``verify_calls`` math-verify requests sent to a worker; ``cache_hits`` verdicts reused (cache or a
    repeat within one batch); ``timeouts`` requests killed at the time limit; ``no_answer`` responses
    without an extractable answer; ``errors`` worker-side parse/verify exceptions (scored 0).
    """
    with _metrics_lock:
        return dict(_metrics)


def reset_reward_metrics() -> None:
    with _metrics_lock:
        for key in _metrics:
            _metrics[key] = 0


def _count(**increments: int) -> None:
    with _metrics_lock:
        for key, value in increments.items():
            _metrics[key] += value


def _gold_list(ground_truth: Any) -> list[str]:
    """Normalised gold answers: a string, a number, or a sequence of alternatives (any may match)."""
    if isinstance(ground_truth, str | bytes | int | float):
        items = [ground_truth]
    elif ground_truth is None:
        items = []
    else:
        try:
            items = list(ground_truth)
        except TypeError:
            items = [ground_truth]
    golds = [normalize_answer(g) for g in items]
    return [g for g in golds if g]


def _is_int(s: str) -> bool:
    body = s[1:] if s.startswith("-") else s
    return body.isdigit() and body.isascii()


def _canon_int(s: str) -> str:
    sign, digits = ("-", s[1:]) if s.startswith("-") else ("", s)
    digits = digits.lstrip("0") or "0"
    return "0" if digits == "0" else sign + digits


_DECIMAL_RE = re.compile(r"^(-?)(\d{1,40})(?:\.(\d{1,40}))?$")
_FRAC_RE = re.compile(r"^(-?)\\frac\{(\d{1,40})\}\{(\d{1,40})\}$")
# Two rationals further apart than this (relative) differ under any rounding math-verify applies
# (it rounds to 6 decimals / 15 significant digits); closer pairs go to math-verify.
_CLEARLY_DIFFERENT = Fraction(1, 10_000)


def _as_rational(s: str) -> Fraction | None:
    """``s`` as an exact rational if it is a plain decimal or ``\\frac{int}{int}`` (bounded length), else None."""
    m = _DECIMAL_RE.match(s)
    if m:
        value = Fraction(int(m.group(2) + (m.group(3) or "")), 10 ** len(m.group(3) or ""))
        return -value if m.group(1) else value
    m = _FRAC_RE.match(s)
    if m and int(m.group(3)) != 0:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return -value if m.group(1) else value
    return None


def _numeric_verdict(pred: str, gold: str) -> bool | None:
    """Exact verdict for two plain numbers when unambiguous: equal rationals, or clearly different ones."""
    if _is_int(pred) and _is_int(gold):  # compare digit strings: no int() on long inputs
        return _canon_int(pred) == _canon_int(gold)
    a, b = _as_rational(pred), _as_rational(gold)
    if a is None or b is None:
        return None
    if a == b:
        return True
    if abs(a - b) > _CLEARLY_DIFFERENT * max(1, abs(a), abs(b)):
        return False
    return None


def _balanced(s: str) -> bool:
    """Unescaped braces balance: ``\\boxed{`` + pred + ``}`` then holds exactly the pred, nothing can leak out."""
    depth = 0
    escaped = False
    for c in s:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _fast_verdict(pred: str, golds: list[str]) -> bool | None:
    """True/False when decidable without math-verify, None otherwise."""
    if not pred or not golds:
        return False
    if pred in golds:
        return True
    if not _balanced(pred):
        return False
    verdicts = [_numeric_verdict(pred, g) for g in golds]
    if any(v is True for v in verdicts):
        return True
    if all(v is False for v in verdicts):
        return False
    return None


def _result(pred: str, correct: bool, timed_out: bool = False) -> dict[str, Any]:
    return {"score": 1.0 if correct else 0.0, "acc": bool(correct), "pred": pred, "timeout": bool(timed_out)}


def _score_slow(pred: str, golds: list[str], timeout_s: float, num_procs: int | None) -> dict[str, Any]:
    for gold in golds:
        verdict = _cache_get((gold, pred))
        if verdict is not None:
            _count(cache_hits=1)
        else:
            _count(verify_calls=1)
            try:
                res = _get_pool(num_procs).verify(gold, pred, timeout_s)
            except RuntimeError:  # the pool was replaced (another caller asked for a new size): retry once
                res = _get_pool(num_procs).verify(gold, pred, timeout_s)
            if res.timed_out:
                _count(timeouts=1)
                return _result(pred, False, timed_out=True)
            if res.error is not None:
                _count(errors=1)
            verdict = res.ok
            if not res.crashed:  # a crash says nothing about the pair: do not remember it
                _cache_put((gold, pred), verdict)
        if verdict:
            return _result(pred, True)
    return _result(pred, False)


# verl's code, vision and search-QA datasets (verl/utils/reward_score/__init__.py): answers this math reward
# cannot judge. Any other data_source is scored by the one math rule.
NOT_MATH_SOURCES = frozenset(
    {"codecontests", "apps", "codeforces", "taco", "hiyouga/geometry3k"}
    | {f"searchR1_{name}" for name in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")}
)


def unscorable_source(data_source: str) -> str | None:
    """Why this reward cannot score rows of ``data_source`` (None: it can; every math source can)."""
    if data_source in NOT_MATH_SOURCES:
        return (
            "not a math dataset; recipe.reward scores math final answers only. Train on math data, or set "
            "reward.custom_reward_function.path to a reward for this dataset"
        )
    return None


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    *,
    timeout_s: float | None = None,
    num_procs: int | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Score one response. Returns ``{"score", "acc", "pred", "timeout"}``; never raises on model output.

    Args:
        data_source: dataset tag (all math sources share one rule; kept for verl's signature).
        solution_str: decoded response text (any length; only the last 8 KB is searched).
        ground_truth: gold answer string, number, or a sequence of accepted alternatives.
        extra_info: unused; verl passes it.
        timeout_s: per-call limit for math-verify, seconds (default 5, env ``COPO_REWARD_TIMEOUT_S``).
        num_procs: worker processes of this process's pool (env ``COPO_REWARD_NUM_PROCS``).
        **_: other keyword arguments verl may pass (reward router address etc.) are ignored.
    """
    timeout = _resolve_timeout(timeout_s)
    _count(calls=1)
    pred = extract_and_normalize(solution_str)
    golds = _gold_list(ground_truth)
    if not pred:
        _count(no_answer=1)
    verdict = _fast_verdict(pred, golds)
    if verdict is not None:
        _count(exact_match=int(verdict))
        return _result(pred, verdict)
    return _score_slow(pred, golds, timeout, num_procs)


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict | None] | None = None,
    *,
    timeout_s: float | None = None,
    num_procs: int | None = None,
    **_: Any,
) -> list[dict[str, Any]]:
    """Score N responses; math-verify calls run in parallel across the worker processes.

    Inputs are parallel sequences of length N (``extra_infos`` may be None). Returns N dicts, in order,
    each as ``compute_score`` returns.
    """
    n = len(solution_strs)
    for name, seq in (("data_sources", data_sources), ("ground_truths", ground_truths)):
        if len(seq) != n:
            raise ValueError(f"{name} has length {len(seq)} but solution_strs has length {n}")
    if extra_infos is not None and len(extra_infos) != n:
        raise ValueError(f"extra_infos has length {len(extra_infos)} but solution_strs has length {n}")
    timeout = _resolve_timeout(timeout_s)
    _count(calls=n)
    results: list[dict[str, Any] | None] = [None] * n
    slow: list[tuple[int, str, list[str]]] = []
    for i in range(n):
        pred = extract_and_normalize(solution_strs[i])
        golds = _gold_list(ground_truths[i])
        if not pred:
            _count(no_answer=1)
        verdict = _fast_verdict(pred, golds)
        if verdict is None:
            slow.append((i, pred, golds))
        else:
            _count(exact_match=int(verdict))
            results[i] = _result(pred, verdict)
    if slow:
        # a group often repeats an answer: verify each distinct (pred, golds) once
        unique: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        for i, pred, golds in slow:
            unique.setdefault((pred, tuple(golds)), []).append(i)
        size = _get_pool(num_procs).size
        with ThreadPoolExecutor(max_workers=size, thread_name_prefix="copo-reward") as executor:
            futures = {
                key: executor.submit(_score_slow, key[0], list(key[1]), timeout, num_procs) for key in unique
            }
            for key, future in futures.items():
                result = future.result()
                _count(cache_hits=len(unique[key]) - 1)
                for i in unique[key]:
                    results[i] = dict(result)
    return [r for r in results if r is not None]
