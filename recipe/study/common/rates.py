"""The learning-rate rule of a study's tuning, on the mean AUC over the tuning seeds of each rate run.

Per method: the rate of the highest mean AUC (ties: the smaller). With the plan's extension
(``StudyPlan.extend_lr_grid``, testbed v4): a chosen rate on an edge of the rates run so far extends
them by a factor of 2 beyond that edge, for that method, until the chosen rate lies inside
(docs/STUDY_PLAN.md, "Learning rates"). The rule needs every rate's runs finished before it can say
whether to extend, so a method's rates are a chain: the grid, then each extension the finished runs
demand; the ``tune`` phase runs the chain's unfinished rates and looks again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

FACTOR = 2.0  # the extension's step beyond an edge (a power of 2: rates stay exact binary multiples)


def best_rate(mean_auc: Mapping[float, float]) -> float:
    """The rate of the highest mean AUC; ties: the smaller rate."""
    best = max(mean_auc.values())
    return min(lr for lr, v in mean_auc.items() if v == best)


def beyond_edge(rates: Sequence[float], chosen: float) -> float | None:
    """The rate the extension adds when ``chosen`` sits on an edge of ``rates`` (None: inside)."""
    if chosen == max(rates):
        return chosen * FACTOR
    if chosen == min(rates):
        return chosen / FACTOR
    return None


def rate_chain(grid: Sequence[float], mean_auc: Callable[[float], float | None], extend: bool) -> list[float]:
    """The rates one method's tuning runs, ascending: the grid, then (``extend``) each extension that the
    finished runs demand. ``mean_auc(lr)`` is None while a rate's runs have not all finished: the chain
    ends there (whether to extend waits on them)."""
    rates = sorted(grid)
    while extend:
        aucs = {lr: mean_auc(lr) for lr in rates}
        finished = {lr: v for lr, v in aucs.items() if v is not None}
        if len(finished) < len(rates):
            break
        more = beyond_edge(rates, best_rate(finished))
        if more is None:
            break
        rates = sorted([*rates, more])
    return rates
