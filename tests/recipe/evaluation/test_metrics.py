"""mean@k / maj@k / pass@k against hand-computed cases and brute-force enumeration."""

from __future__ import annotations

import itertools
from math import comb

import pytest

from recipe.evaluation.metrics import dataset_metrics, maj_at_k, majority_vote, mean_at_k, pass_at_k


def _pass_at_k_enumerated(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_enumerated(n, c, k), abs=1e-12)


def test_pass_at_k_hand_cases() -> None:
    assert pass_at_k(2, 1, 1) == pytest.approx(0.5)
    assert pass_at_k(2, 1, 2) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - comb(3, 2) / comb(4, 2))  # 0.5
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(64, 2, 8) == pytest.approx(1 - comb(62, 8) / comb(64, 8))
    # pass@1 is the fraction correct
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_bad_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_at_k() -> None:
    assert mean_at_k([1, 0, 1, 1]) == pytest.approx(0.75)
    assert mean_at_k([0.5]) == 0.5
    with pytest.raises(ValueError, match="correct"):
        mean_at_k([])


def test_majority_vote_plain_majority() -> None:
    #          0    1    2    3    4
    preds = ["3", "5", "5", "3", "5"]
    assert majority_vote(preds) == 1  # "5" x3 beats "3" x2; first "5" is sample 1
    assert maj_at_k([0, 1, 1, 0, 1], preds) == 1.0
    assert maj_at_k([1, 0, 0, 1, 0], preds) == 0.0


def test_majority_vote_tie_goes_to_first_seen_answer() -> None:
    assert majority_vote(["7", "2", "2", "7"]) == 0  # 2-2 tie: "7" appeared first
    assert majority_vote(["2", "7", "7", "2"]) == 0  # same multiset, other order: "2" first
    assert maj_at_k([0, 1, 1, 0], ["7", "2", "2", "7"]) == 0.0
    assert maj_at_k([0, 1, 1, 0], ["2", "7", "7", "2"]) == 0.0
    assert maj_at_k([1, 0, 0, 1], ["2", "7", "7", "2"]) == 1.0
    # deterministic: same input, same answer, every time
    assert len({majority_vote(["b", "a", "c", "a", "b", "c"]) for _ in range(20)}) == 1
    assert majority_vote(["b", "a", "c", "a", "b", "c"]) == 0


def test_majority_vote_ignores_missing_answers_and_strips() -> None:
    # three unparseable responses do not outvote two agreeing answers
    assert majority_vote(["", None, " 4 ", "", "4"]) == 2
    assert maj_at_k([0, 0, 1, 0, 1], ["", None, " 4 ", "", "4"]) == 1.0
    # all unparseable: the vote falls to sample 0
    assert majority_vote([None, "", "  "]) == 0
    with pytest.raises(ValueError, match="preds"):
        maj_at_k([1, 0], ["1"])


def test_dataset_metrics_hand_computed() -> None:
    correct = [[1, 0], [0, 0], [1, 1]]
    preds = [["5", "6"], ["1", "2"], ["9", "9"]]
    tokens = [[10, 20], [30, 40], [5, 15]]
    m = dataset_metrics(correct, preds, tokens)
    assert m.n_problems == 3 and m.k == 2
    assert m.mean_at_k == pytest.approx((0.5 + 0 + 1) / 3)
    # maj: tie "5"/"6" -> "5" (correct); tie "1"/"2" -> wrong; "9" correct
    assert m.maj_at_k == pytest.approx(2 / 3)
    assert m.pass_at_k == pytest.approx(2 / 3)
    assert m.mean_response_tokens == pytest.approx(120 / 6)


def test_dataset_metrics_rejects_ragged_k() -> None:
    with pytest.raises(ValueError, match="k must be uniform"):
        dataset_metrics([[1, 0], [1]], [["1", "2"], ["1"]], [[1, 1], [1]])
    with pytest.raises(ValueError, match="empty"):
        dataset_metrics([], [], [])
