"""Sampling metrics for one problem and for a dataset: mean@k, maj@k, pass@k.

All functions are pure Python (no torch) so they are cheap to test against hand-computed cases.
A problem's samples are given in sample order (sample index 0..n-1); order matters only for
breaking majority-vote ties, which makes maj@k deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def _check_lengths(correct: Sequence[float], preds: Sequence[str | None] | None = None) -> int:
    n = len(correct)
    if n == 0:
        raise ValueError("correct must hold at least one sample per problem, got an empty sequence")
    if preds is not None and len(preds) != n:
        raise ValueError(f"preds has {len(preds)} entries but correct has {n}: one pred per sample is needed")
    return n


def mean_at_k(correct: Sequence[float]) -> float:
    """mean@k of one problem: the average correctness of its k samples.

    Args:
        correct: (k,) per-sample correctness (0/1, or any float score).
    """
    n = _check_lengths(correct)
    return float(sum(float(c) for c in correct) / n)


def majority_vote(preds: Sequence[str | None]) -> int:
    """Index of the sample whose answer wins the majority vote.

    Votes go to the stripped answer string. Empty or missing answers (unparseable responses) do
    not vote unless every answer is empty. Ties between equally frequent answers go to the
    answer that appears first in sample order, so the result never depends on hashing or on
    string order.

    Args:
        preds: (k,) extracted final answers, ``None`` or ``""`` when none was found.

    Returns:
        The index of the first sample carrying the winning answer.
    """
    if len(preds) == 0:
        raise ValueError("preds must hold at least one sample, got an empty sequence")
    keys = [(p or "").strip() for p in preds]
    counts: dict[str, int] = {}
    first_index: dict[str, int] = {}
    for i, key in enumerate(keys):
        if not key:
            continue
        counts[key] = counts.get(key, 0) + 1
        first_index.setdefault(key, i)
    if not counts:
        return 0
    # max over (count, -first position): the most frequent answer, earliest on ties.
    winner = max(counts, key=lambda key: (counts[key], -first_index[key]))
    return first_index[winner]


def maj_at_k(correct: Sequence[float], preds: Sequence[str | None]) -> float:
    """maj@k of one problem: the correctness of the majority-voted answer (see ``majority_vote``).

    Args:
        correct: (k,) per-sample correctness.
        preds: (k,) extracted answers, same order.
    """
    _check_lengths(correct, preds)
    return float(correct[majority_vote(preds)])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al., 2021): 1 - C(n-c, k) / C(n, k).

    The probability that at least one of k samples drawn without replacement from n samples,
    c of them correct, is correct. Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which avoids
    huge binomials.

    Args:
        n: samples drawn for the problem.
        c: correct samples among them (0 <= c <= n).
        k: budget (1 <= k <= n).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}: draw at least k samples per problem")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


@dataclass(frozen=True)
class DatasetMetrics:
    """Averages over the problems of one (checkpoint, dataset) pair; accuracies in [0, 1]."""

    n_problems: int
    k: int
    mean_at_k: float
    maj_at_k: float
    pass_at_k: float
    mean_response_tokens: float


def dataset_metrics(
    correct: Sequence[Sequence[float]],
    preds: Sequence[Sequence[str | None]],
    response_tokens: Sequence[Sequence[int]],
) -> DatasetMetrics:
    """Average the per-problem metrics over a dataset.

    Args:
        correct: (P, k) per-sample correctness; every problem must have the same k.
        preds: (P, k) extracted answers.
        response_tokens: (P, k) generated token counts.
    """
    if len(correct) == 0:
        raise ValueError("correct holds no problems: the dataset is empty")
    if not len(correct) == len(preds) == len(response_tokens):
        raise ValueError(
            f"correct, preds and response_tokens must list the same problems, got "
            f"{len(correct)}, {len(preds)} and {len(response_tokens)}"
        )
    k = len(correct[0])
    means, majs, passes, lengths = [], [], [], []
    for j, (c, p, t) in enumerate(zip(correct, preds, response_tokens, strict=True)):
        if len(c) != k or len(t) != k:
            raise ValueError(f"problem {j} has {len(c)} samples, problem 0 has {k}: k must be uniform")
        means.append(mean_at_k(c))
        majs.append(maj_at_k(c, p))
        # pass@k counts a sample as solved when its correctness is positive (scores may be floats).
        passes.append(pass_at_k(k, sum(1 for x in c if float(x) > 0), k))
        lengths.extend(int(x) for x in t)
    n_problems = len(correct)
    return DatasetMetrics(
        n_problems=n_problems,
        k=k,
        mean_at_k=sum(means) / n_problems,
        maj_at_k=sum(majs) / n_problems,
        pass_at_k=sum(passes) / n_problems,
        mean_response_tokens=sum(lengths) / len(lengths),
    )
