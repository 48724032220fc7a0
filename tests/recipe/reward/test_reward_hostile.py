"""Hostile model output: bounded time, no code execution, no crash of the caller.

Time bounds here are deliberately loose (limit + worker restart + a shared, loaded 2-core machine):
they check "bounded", not "fast". Measured timings are printed by scripts/bench_reward.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from recipe import reward
from recipe.reward.pool import VerifyPool

LIMIT_S = 1.0
# generous: limit + a replacement worker's start (~1 s idle, ~10 s seen at load 30 on 2 cores)
BOUND_S = LIMIT_S + 60.0


@pytest.fixture(scope="module", autouse=True)
def _pool_lifecycle():
    yield
    reward.shutdown_pool()


def _injections(marker: Path) -> list[str]:
    cmd = f"touch {marker}"
    return [
        f"\\boxed{{__import__('os').system('{cmd}')}}",
        f"The answer is __import__('os').system('{cmd}')",
        f"\\boxed{{eval(\"__import__('os').system('{cmd}')\")}}",
        f"\\boxed{{exec('import os; os.system(\"{cmd}\")')}}",
        f"\\boxed{{\\text{{__import__('os').system('{cmd}')}}}}",
        f"Answer: (lambda: __import__('os').system('{cmd}'))()",
    ]


def test_code_injection_has_no_side_effect(tmp_path: Path):
    marker = tmp_path / "pwned"
    for payload in _injections(marker):
        t0 = time.monotonic()
        out = reward.compute_score("m", payload, "5", timeout_s=LIMIT_S)
        assert time.monotonic() - t0 < BOUND_S
        assert out["score"] == 0.0
    # the same strings as gold answers must not execute either
    reward.compute_score("m", "\\boxed{5}", _injections(marker)[0], timeout_s=LIMIT_S)
    assert not marker.exists()


@pytest.mark.parametrize("payload", ["\\boxed{9^{9^{9^9}}}", "\\boxed{2^{2^{2^{2^{2^{100}}}}}}"])
def test_huge_exponent_times_out_and_is_counted(payload: str):
    reward.reset_reward_metrics()
    t0 = time.monotonic()
    out = reward.compute_score("m", payload, "1", timeout_s=LIMIT_S, num_procs=2)
    elapsed = time.monotonic() - t0
    assert elapsed < BOUND_S
    assert out == {"score": 0.0, "acc": False, "pred": payload[7:-1], "timeout": True}
    assert reward.reward_metrics()["timeouts"] == 1
    # the killed worker was replaced: scoring still works afterwards
    assert (
        reward.compute_score("m", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}", num_procs=2, timeout_s=60)["score"]
        == 1.0
    )


def test_timeout_in_batch_does_not_block_others():
    reward.reset_reward_metrics()
    sols = ["\\boxed{9^{9^{9^9}}}", "\\boxed{0.5}", "\\boxed{\\frac{2}{4}}", "\\boxed{7}"]
    golds = ["1", "\\frac{1}{2}", "\\frac{1}{2}", "7"]
    outs = reward.compute_score_batch(["m"] * 4, sols, golds, timeout_s=LIMIT_S, num_procs=2)
    assert [o["score"] for o in outs] == [0.0, 1.0, 1.0, 1.0]
    assert [o["timeout"] for o in outs] == [True, False, False, False]
    assert reward.reward_metrics()["timeouts"] == 1


@pytest.mark.parametrize(
    "payload",
    [
        "{" * (1 << 20),
        "\\boxed{" + "{" * (1 << 20),
        "\\boxed{" * (1 << 17),
        "}" * (1 << 20) + "\\boxed{3}",
        ("\\boxed{" + "{" * 1000) * 1000,
        "1" * (1 << 20),
        "answer is " * (1 << 17),
        "-" * (1 << 20) + "1",
        "\\frac" * (1 << 18),
        # answer lines, math spans and fallbacks (issue 14's extraction)
        "Answer: " + "(" * (1 << 20),
        "Answer:\n\n\n\n" * (1 << 16),
        "Answer:" * (1 << 17),
        "$" * (1 << 20),
        "\\(\n" * (1 << 18) + "\\)",
        "$\n" * (1 << 19),
        "\\boxed{1} and " * (1 << 16),
        "{" * (1 << 19) + "2",
        "x" * (1 << 20) + "2",
        "the answer is (" * (1 << 16),
    ],
    ids=[
        "open_braces",
        "boxed_open",
        "many_boxed",
        "close_braces",
        "many_unbalanced",
        "digits",
        "tails",
        "dashes",
        "fracs",
        "answer_open_parens",
        "empty_answer_lines",
        "answer_labels",
        "dollars",
        "inline_math_newlines",
        "dollar_newlines",
        "box_runs",
        "glued_braces",
        "glued_letters",
        "answer_is_parens",
    ],
)
def test_megabyte_inputs_are_bounded(payload: str):
    t0 = time.monotonic()
    out = reward.compute_score("m", payload, "3", timeout_s=LIMIT_S)
    assert time.monotonic() - t0 < BOUND_S
    assert out["score"] in (0.0, 1.0)
    assert isinstance(out["pred"], str) and len(out["pred"]) <= 1024


def test_nested_braces_answer_is_found_after_garbage():
    out = reward.compute_score("m", "{" * (1 << 20) + " so \\boxed{3}", "3", timeout_s=LIMIT_S)
    assert out["score"] == 1.0 and out["pred"] == "3"


@pytest.mark.parametrize(
    "payload",
    ["\ud800\\boxed{3}", "\\boxed{3}\udfff", "\\boxed{3\udc80}", b"\xff\xfe\\boxed{3}", "\x00\\boxed{3}\x00"],
    ids=["lone_high", "lone_low", "inside_box", "bytes_invalid_utf8", "nul"],
)
def test_invalid_utf8_and_surrogates(payload: str | bytes):
    out = reward.compute_score("m", payload, "3", timeout_s=60)
    out["pred"].encode("utf-8")  # always encodable
    assert out["timeout"] is False


def test_surrogate_reaches_math_verify_without_crash():
    # not decidable by the fast path: the worker gets a sanitised string
    out = reward.compute_score("m", "\\boxed{\\frac{1}{2}\ud800}", "0.5", timeout_s=60)
    assert out["timeout"] is False
    out["pred"].encode("utf-8")


def test_pool_replaces_killed_worker():
    pool = VerifyPool(1)
    try:
        res = pool.verify("1", "9^{9^{9^9}}", timeout_s=LIMIT_S)
        assert res.timed_out and not res.ok
        assert pool.timeouts == 1 and pool.restarts == 1
        assert pool.verify("\\frac{1}{2}", "0.5", timeout_s=30).ok
    finally:
        pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.verify("1", "1", timeout_s=1)


def test_dead_worker_is_reported_and_replaced():
    pool = VerifyPool(1)
    try:
        assert pool.verify("1", "1", timeout_s=30).ok  # starts the worker
        victim = pool._idle.queue[0]  # white-box: simulate an OOM kill of the idle worker
        victim.proc.kill()
        victim.proc.wait()
        res = pool.verify("\\frac{1}{2}", "0.5", timeout_s=30)
        assert res.crashed and not res.timed_out and not res.ok
        assert pool.timeouts == 0 and pool.restarts == 1
        assert pool.verify("\\frac{1}{2}", "0.5", timeout_s=30).ok
    finally:
        pool.close()
