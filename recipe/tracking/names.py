"""Every metric name the project writes or reads, in one place: verl's, and the recipe's built from the
keys that ``copo_core`` exports where it computes them (``copo_core.metrics``, ``copo_core.gcpo``).

verl's own names come from ``verl/trainer/ppo/metric_utils.py`` and the v1 trainer; the recipe adds
three prefixes, written by ``recipe/copo/step.py`` (and ``recipe/copo/trainer.py`` for verl's estimators):

* ``copo/<key>``: COPO's batch statistics (``copo_core.copo_batch_metrics``), COPO runs only;
* ``gcpo/<key>``: GCPO's step statistics (``copo_core.gcpo_metrics`` plus timings), when GCPO's
  advantage is computed;
* ``signal/<key>``: how a step spends its samples, with the group outcome fractions
  (``copo_core.signal_budget_metrics``), every estimator, so GRPO, DAPO and COPO runs compare directly.
"""

from __future__ import annotations

from copo_core import gcpo as _gcpo
from copo_core import metrics as _core

COPO_PREFIX = "copo/"
GCPO_PREFIX = "gcpo/"
SIGNAL_PREFIX = "signal/"
VAL_PREFIX = "val-core/"

# verl
SCORE_MEAN = "critic/score/mean"  # mean verifier score: the training accuracy for a 1/0 reward
REWARD_MEAN = "critic/rewards/mean"  # what the advantage sees (the score unless a KL penalty is added)
RESPONSE_LENGTH_MEAN = "response_length/mean"
STEP_TIME = "timing_s/step"
TOKEN_ENTROPY = "actor/entropy"
# DAPO's group filtering: responses generated and then thrown away
FILTER_GROUPS_DISCARDED = (
    "training/filter_groups/evicted_samples",
    "training/filter_groups/discarded_surplus_samples",
)

# the recipe: each name is a prefix and the key its copo_core function returns
COPO_KEYS = tuple(COPO_PREFIX + key for key in _core.COPO_METRIC_KEYS)
SIGNAL_KEYS = tuple(SIGNAL_PREFIX + key for key in _core.SIGNAL_METRIC_KEYS)
GCPO_KEYS = tuple(GCPO_PREFIX + key for key in _gcpo.GCPO_METRIC_KEYS)
COPO_ENTROPY_MEAN = COPO_PREFIX + _core.ENTROPY_MEAN
COPO_LOCAL_WEIGHT_MEAN = COPO_PREFIX + _core.LOCAL_WEIGHT_MEAN
COPO_FRAC_NONZERO_ADV = COPO_PREFIX + _core.FRAC_NONZERO_ADV
SIGNAL_FRAC_NONZERO_ADV = SIGNAL_PREFIX + _core.FRAC_NONZERO_ADV
SIGNAL_FRAC_ALL_CORRECT = SIGNAL_PREFIX + _core.FRAC_GROUPS_ALL_CORRECT
SIGNAL_FRAC_ALL_WRONG = SIGNAL_PREFIX + _core.FRAC_GROUPS_ALL_WRONG
SIGNAL_FRAC_ZERO_VARIANCE = SIGNAL_PREFIX + _core.FRAC_GROUPS_ZERO_VARIANCE
SIGNAL_NUM_RESPONSES = SIGNAL_PREFIX + _core.NUM_RESPONSES
SIGNAL_NUM_GROUPS = SIGNAL_PREFIX + _core.NUM_GROUPS


def prefixed(prefix: str, metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with every key under ``prefix`` (a key that already has it is kept as it is)."""
    return {(key if key.startswith(prefix) else prefix + key): float(value) for key, value in metrics.items()}
