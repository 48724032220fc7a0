"""Rule-based math reward for COPO: score, correctness and the normalised final answer.

Use as verl 0.9.1's custom reward function (the reward loop calls it once per response, from executor
threads inside Ray actors)::

    reward.custom_reward_function.path=/abs/path/to/recipe/copo/reward.py
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.timeout_s=5     # optional
    +reward.custom_reward_function.reward_kwargs.num_procs=2     # optional, per reward-loop worker

(the legacy top-level ``custom_reward_function.path``/``.name`` keys are migrated to these by verl).

``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` returns
``{"score": float, "acc": bool, "pred": str, "timeout": bool}``. verl's reward managers copy every key of
the dict into ``reward_extra_info``; the agent loop / reward loop turn those into
``batch.non_tensor_batch[key]`` (a numpy array per key, one entry per response) and list the keys in
``meta_info["reward_extra_keys"]``. The COPO trainer reads the answers as ``batch.non_tensor_batch["pred"]``;
verl's validation also uses ``pred`` for maj@N voting and averages ``score``/``acc``/``timeout``.

``compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos)`` scores N responses with
the math-verify calls spread over the worker processes (for evaluation scripts and batch managers).

Configuration, in precedence order: keyword arguments (``timeout_s``, ``num_procs``), then the
environment variables ``COPO_REWARD_TIMEOUT_S`` and ``COPO_REWARD_NUM_PROCS``, then the defaults 5 s
and ``min(cpu cores, 8)`` worker processes; ``COPO_REWARD_CACHE_SIZE`` (default 65536 verdicts, 0 = off).
Each process that scores (each verl reward-loop worker actor, ``reward.num_workers`` of them) owns its
own pool, started lazily on the first call that needs math-verify: keep
``reward.num_workers * num_procs`` near the number of cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import recipe.copo.reward_score as _impl
except ImportError:  # loaded by file path (verl's custom_reward_function.path) without the repo on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import recipe.copo.reward_score as _impl

DEFAULT_TIMEOUT_S = _impl.DEFAULT_TIMEOUT_S
compute_score = _impl.compute_score
compute_score_batch = _impl.compute_score_batch
reward_metrics = _impl.reward_metrics
reset_reward_metrics = _impl.reset_reward_metrics
clear_cache = _impl.clear_cache
shutdown_pool = _impl.shutdown_pool

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "compute_score",
    "compute_score_batch",
    "reward_metrics",
    "reset_reward_metrics",
    "clear_cache",
    "shutdown_pool",
]
