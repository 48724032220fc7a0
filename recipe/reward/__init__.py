"""Rule-based math reward: score, correctness and the normalised final answer.

verl 0.9.1 custom reward function (``reward.custom_reward_function.path=pkg://recipe.reward``,
``name=compute_score``); the reward loop calls it once per response, from executor threads.
``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` returns
``{"score": float, "acc": bool, "pred": str, "timeout": bool}``: verl passes every key but ``score``
to the trainer as reward extra info, and COPO reads ``pred`` (the normalised final answer) for the
consistency entropy. ``compute_score_batch`` scores N responses at once (evaluation, benchmarks).
Modules: ``extract`` (which final answer: the response's last ``\\boxed{}``/``Answer:``/"final answer is"
marker, else a whole-expression fallback), ``normalize`` (its canonical ``pred``), ``latex_scan`` (linear-time
boxes and math spans), ``score`` (verdicts, cache, metrics), ``pool`` (killable math-verify processes),
``_worker`` (the process those run). ``suites/`` (package data, ``SUITES_DIR``): the labelled reward suites
that the tests and ``recipe.bench.reward`` score.
"""

from pathlib import Path

from recipe.reward.score import (
    DEFAULT_TIMEOUT_S,
    clear_cache,
    compute_score,
    compute_score_batch,
    reset_reward_metrics,
    reward_metrics,
    shutdown_pool,
)

# The labelled reward suites (package data): read by tests/recipe/reward/test_reward_suite.py and the bench.
SUITES_DIR = Path(__file__).with_name("suites")

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "SUITES_DIR",
    "compute_score",
    "compute_score_batch",
    "reward_metrics",
    "reset_reward_metrics",
    "clear_cache",
    "shutdown_pool",
]
