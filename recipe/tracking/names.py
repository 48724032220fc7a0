"""Every metric name the project writes or reads, in one place.

verl's own names come from ``verl/trainer/ppo/metric_utils.py`` and the v1 trainer; the recipe adds
three prefixes, written by ``recipe/copo/step.py`` (and ``recipe/copo/trainer.py`` for verl's estimators):

* ``copo/<key>``: COPO's batch statistics (``copo_core.copo_batch_metrics``), COPO runs only;
* ``gcpo/<key>``: GCPO's step statistics (``copo_core.gcpo_metrics`` plus timings), when GCPO's
  advantage is computed;
* ``signal/<key>``: how a step spends its samples, with the group outcome fractions
  (``copo_core.signal_budget_metrics``), every estimator, so GRPO, DAPO and COPO runs compare directly.
"""

from __future__ import annotations

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

# the recipe
COPO_ENTROPY_MEAN = COPO_PREFIX + "entropy_mean"
COPO_LOCAL_WEIGHT_MEAN = COPO_PREFIX + "local_weight_mean"
COPO_FRAC_NONZERO_ADV = COPO_PREFIX + "frac_nonzero_adv"
SIGNAL_FRAC_NONZERO_ADV = SIGNAL_PREFIX + "frac_nonzero_adv"
SIGNAL_FRAC_ALL_CORRECT = SIGNAL_PREFIX + "frac_groups_all_correct"
SIGNAL_FRAC_ALL_WRONG = SIGNAL_PREFIX + "frac_groups_all_wrong"
SIGNAL_FRAC_ZERO_VARIANCE = SIGNAL_PREFIX + "frac_groups_zero_variance"
SIGNAL_NUM_RESPONSES = SIGNAL_PREFIX + "num_responses"
SIGNAL_NUM_GROUPS = SIGNAL_PREFIX + "num_groups"


def prefixed(prefix: str, metrics: dict[str, float]) -> dict[str, float]:
    """``metrics`` with every key under ``prefix`` (a key that already has it is kept as it is)."""
    return {(key if key.startswith(prefix) else prefix + key): float(value) for key, value in metrics.items()}
