"""Tests for recipe/reward/__init__.py: the labelled table, surface variants, batch path, concurrency."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from recipe import reward
from recipe.reward.extract import MAX_SEARCH_CHARS, extract_and_normalize, last_boxed
from tests.recipe.reward.reward_cases import CASES, SAME_PRED_GROUPS

# Legitimate answers take well under a second; a generous limit keeps these tests about verdicts
# (not timing) on a saturated shared machine. The limit itself is tested in test_reward_hostile.py.
LEGIT_LIMIT_S = 60.0


@pytest.fixture(scope="module", autouse=True)
def _pool_lifecycle():
    yield
    reward.shutdown_pool()


def test_table_is_large_and_unique():
    assert len(CASES) >= 60
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case_id", "response", "gold", "score", "pred"), CASES, ids=[c[0] for c in CASES])
def test_labelled_case(case_id: str, response: str, gold: str, score: float, pred: str):
    out = reward.compute_score("math", response, gold, {"index": 0}, timeout_s=LEGIT_LIMIT_S)
    assert out["pred"] == pred
    assert out["score"] == score
    assert out["acc"] is (score == 1.0)
    assert out["timeout"] is False
    assert set(out) == {"score", "acc", "pred", "timeout"}


def test_batch_matches_table_and_single_calls():
    reward.clear_cache()  # exercise the parallel worker path, not cached verdicts
    results = reward.compute_score_batch(
        [c[0] for c in CASES],
        [c[1] for c in CASES],
        [c[2] for c in CASES],
        [None] * len(CASES),
        num_procs=2,
        timeout_s=LEGIT_LIMIT_S,
    )
    assert [r["score"] for r in results] == [c[3] for c in CASES]
    assert [r["pred"] for r in results] == [c[4] for c in CASES]


@pytest.mark.parametrize("variants", SAME_PRED_GROUPS, ids=lambda g: g[1][:20])
def test_surface_variants_share_one_pred(variants: list[str]):
    preds = {extract_and_normalize(v) for v in variants}
    assert len(preds) == 1, preds


def test_surface_variants_from_issue():
    assert extract_and_normalize("\\boxed{\\dfrac{1}{2}}") == extract_and_normalize("\\boxed{\\frac{1}{2}}")
    assert extract_and_normalize("\\boxed{$5$}") == extract_and_normalize("\\boxed{ 5 }") == "5"
    assert extract_and_normalize("\\boxed{5 \\text{ cm}}") == extract_and_normalize("\\boxed{5}")


def test_ground_truth_forms():
    # numbers, boxed golds and lists of accepted alternatives
    assert reward.compute_score("x", "\\boxed{12}", 12)["score"] == 1.0
    assert reward.compute_score("x", "\\boxed{12}", "\\boxed{12}")["score"] == 1.0
    assert reward.compute_score("x", "\\boxed{B}", ["A", "B"])["score"] == 1.0
    assert reward.compute_score("x", "\\boxed{C}", ["A", "B"])["score"] == 0.0
    assert reward.compute_score("x", "\\boxed{5}", "")["score"] == 0.0


def test_unbalanced_pred_cannot_smuggle_a_second_box():
    # answer tail "1} + \\boxed{2" would become \\boxed{1} + \\boxed{2} inside math-verify
    out = reward.compute_score("m", "Answer: 1} + \\boxed{2", "2")
    assert out["score"] == 0.0 and out["pred"] == "1}+\\boxed{2"


def test_only_tail_is_searched():
    # an answer buried more than MAX_SEARCH_CHARS before the end is not found (documented limit)
    text = "\\boxed{7}" + "." * (MAX_SEARCH_CHARS + 10)
    assert extract_and_normalize(text) == ""
    assert extract_and_normalize("." * (MAX_SEARCH_CHARS * 4) + "\\boxed{7}") == "7"


def test_last_boxed_balanced_matching():
    assert last_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert last_boxed("\\boxed{\\{x\\}}") == "\\{x\\}"
    assert last_boxed("\\boxed{open") is None
    assert last_boxed("no box") is None


def test_non_main_threads_and_metrics():
    """math-verify's signal.alarm raises outside the main thread; our path must not."""
    reward.reset_reward_metrics()
    reward.clear_cache()
    cases = CASES[:24]
    with ThreadPoolExecutor(max_workers=6) as ex:
        outs = list(ex.map(lambda c: reward.compute_score("m", c[1], c[2], num_procs=2), cases))
    assert [o["score"] for o in outs] == [c[3] for c in cases]
    m = reward.reward_metrics()
    assert m["calls"] == len(cases)
    assert m["timeouts"] == 0
    # every correct answer was decided either by the exact path or by math-verify
    assert m["exact_match"] + m["verify_calls"] + m["cache_hits"] >= sum(c[3] == 1.0 for c in cases)
    assert threading.current_thread() is threading.main_thread()


def test_async_caller():
    async def main() -> list[dict]:
        loop = asyncio.get_running_loop()
        futs = [
            loop.run_in_executor(None, reward.compute_score, "m", "\\boxed{0.5}", "\\frac{1}{2}")
            for _ in range(4)
        ]
        # a direct (blocking) call from a coroutine must also work: no signals involved
        direct = reward.compute_score("m", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}")
        return [direct, *await asyncio.gather(*futs)]

    outs = asyncio.run(main())
    assert all(o["score"] == 1.0 for o in outs)


def test_bad_arguments():
    with pytest.raises(ValueError, match="timeout_s"):
        reward.compute_score("m", "\\boxed{1}", "1", timeout_s=0)
    with pytest.raises(ValueError, match="ground_truths"):
        reward.compute_score_batch(["m", "m"], ["a", "b"], ["1"])
    with pytest.raises(ValueError, match="num_procs"):
        reward.compute_score("m", "\\boxed{x^2}", "x^3", num_procs=0)


def test_verdict_cache(monkeypatch):
    reward.clear_cache()
    reward.reset_reward_metrics()
    for _ in range(3):
        assert reward.compute_score("m", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}")["score"] == 1.0
    m = reward.reward_metrics()
    assert (m["verify_calls"], m["cache_hits"]) == (1, 2)
    monkeypatch.setenv("COPO_REWARD_CACHE_SIZE", "0")
    reward.clear_cache()
    reward.reset_reward_metrics()
    for _ in range(2):
        assert reward.compute_score("m", "\\boxed{\\sqrt{3}}", "2\\sqrt{2}")["score"] == 0.0
    m = reward.reward_metrics()
    assert (m["verify_calls"], m["cache_hits"]) == (2, 0)


def test_batch_verifies_each_distinct_pair_once():
    reward.clear_cache()
    reward.reset_reward_metrics()
    sols = ["\\boxed{\\sqrt{8}}", "so \\boxed{\\sqrt{8}}", "\\boxed{\\sqrt{3}}", "$\\boxed{\\sqrt{8}}$"]
    outs = reward.compute_score_batch(["m"] * 4, sols, ["2\\sqrt{2}"] * 4)
    assert [o["score"] for o in outs] == [1.0, 1.0, 0.0, 1.0]
    m = reward.reward_metrics()
    assert (m["verify_calls"], m["cache_hits"]) == (2, 2)
    outs[0]["pred"] = "mutated"  # results are independent dicts
    assert outs[1]["pred"] == "\\sqrt{8}"


# (pred, gold, decided in-process?): math-verify is the oracle for every pair the fast path decides
NUMERIC_PAIRS = [
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac{2}{4}", "\\frac{1}{2}", True),
    ("-0.75", "-\\frac{3}{4}", True),
    ("0.25", "\\frac{1}{2}", True),
    ("007", "7", True),
    ("12", "-12", True),
    ("1.5", "\\frac{3}{2}", True),
    ("18.90", "18.9", True),
    ("100", "98", True),
    ("3.0001", "3", False),  # near-equal pairs are left to math-verify's tolerance rules
    ("100", "99.99", False),
    ("\\frac{1}{3}", "0.333333333", False),
    ("2.000001", "2", False),
]


@pytest.fixture(scope="module")
def oracle_pool():
    from recipe.reward.pool import VerifyPool

    pool = VerifyPool(1)
    yield pool
    pool.close()


@pytest.mark.parametrize(("pred", "gold", "decided"), NUMERIC_PAIRS)
def test_numeric_fast_path_agrees_with_math_verify(pred: str, gold: str, decided: bool, oracle_pool):
    from recipe.reward.score import _fast_verdict

    fast = _fast_verdict(pred, [gold])
    assert (fast is not None) == decided
    if decided:
        assert fast == oracle_pool.verify(gold, pred, timeout_s=30).ok
