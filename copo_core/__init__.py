"""COPO math in pure torch (no verl, ray or transformers import).

Public API (SPEC section 6):
    compute_copo_advantages(scores, index, answers=None, ...) -> CopoAdvantages
    copo_policy_loss(old_log_prob, log_prob, local_adv, global_adv, local_weight, response_mask, ...)
    copo_batch_metrics(adv, index=None) -> dict[str, float]
    signal_budget_metrics(advantages, response_mask, scores, index) -> dict[str, float]
    wrong_answer_metrics(advantages, response_mask, scores, index) -> dict[str, float]  (copo_core/mechanism.py)
    group_inverse(index) -> (LongTensor (N,), P)
    gcpo_shapley, compute_gcpo_advantages, gcpo_metrics  (SPEC section 8, copo_core/gcpo.py)
    CopoConfig, GcpoConfig: the algorithm.copo / algorithm.gcpo sections (defaults + checks)
"""

from copo_core.advantages import (
    LOCAL_ADVANTAGES,
    CopoAdvantages,
    compute_copo_advantages,
    group_normalized_advantage,
    rloo_advantage,
)
from copo_core.config import (
    BLEND_MODES,
    ENTROPY_SOURCES,
    LOCAL_ESTIMATORS,
    WRONG_ANSWER_GLOBAL,
    ConfigError,
    CopoConfig,
    GcpoConfig,
)
from copo_core.gcpo import (
    compute_gcpo_advantages,
    gcpo_advantages_from_shares,
    gcpo_metrics,
    gcpo_shapley,
)
from copo_core.grouping import group_inverse
from copo_core.losses import LOSS_AGG_MODES, agg_loss, copo_policy_loss
from copo_core.mechanism import MECHANISM_METRIC_KEYS, wrong_answer_metrics
from copo_core.metrics import copo_batch_metrics, signal_budget_metrics

__all__ = [
    "BLEND_MODES",
    "ENTROPY_SOURCES",
    "LOCAL_ADVANTAGES",
    "LOCAL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "MECHANISM_METRIC_KEYS",
    "WRONG_ANSWER_GLOBAL",
    "ConfigError",
    "CopoAdvantages",
    "CopoConfig",
    "GcpoConfig",
    "agg_loss",
    "compute_copo_advantages",
    "copo_batch_metrics",
    "compute_gcpo_advantages",
    "copo_policy_loss",
    "gcpo_advantages_from_shares",
    "gcpo_metrics",
    "gcpo_shapley",
    "group_inverse",
    "group_normalized_advantage",
    "rloo_advantage",
    "signal_budget_metrics",
    "wrong_answer_metrics",
]
