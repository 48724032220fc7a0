"""Every metric name the project writes or reads, in one place: verl's, and the recipe's built from the
keys that ``copo_core`` exports where it computes them (``copo_core.metrics``, ``copo_core.gcpo``).

verl's own names come from ``verl/trainer/ppo/metric_utils.py`` and the v1 trainer; the recipe adds
three prefixes, written by ``recipe/copo/step.py`` (and ``recipe/copo/trainer.py`` for verl's estimators):

* ``copo/<key>``: COPO's batch statistics (``copo_core.copo_batch_metrics``), COPO runs only;
* ``gcpo/<key>``: GCPO's step statistics (``copo_core.gcpo_metrics`` plus timings), when GCPO's
  advantage is computed;
* ``signal/<key>``: how a step spends its samples, with the group outcome fractions
  (``copo_core.signal_budget_metrics``), every estimator, so GRPO, DAPO and COPO runs compare directly;
* ``mechanism/<key>``: the advantage of wrong answers by group kind and prompt success, and the share
  of each group kind (``copo_core.wrong_answer_metrics``), every estimator.
"""

from __future__ import annotations

from copo_core import gcpo as _gcpo
from copo_core import mechanism as _mechanism
from copo_core import metrics as _core

COPO_PREFIX = "copo/"
GCPO_PREFIX = "gcpo/"
SIGNAL_PREFIX = "signal/"
MECHANISM_PREFIX = "mechanism/"
VAL_PREFIX = "val-core/"

# verl
SCORE_MEAN = "critic/score/mean"  # mean verifier score: the training accuracy for a 1/0 reward
REWARD_MEAN = "critic/rewards/mean"  # what the advantage sees (the score unless a KL penalty is added)
RESPONSE_LENGTH_MEAN = "response_length/mean"
RESPONSE_LENGTH_MAX = "response_length/max"
PROMPT_LENGTH_MEAN = "prompt_length/mean"
PROMPT_LENGTH_MAX = "prompt_length/max"
TIMING_PREFIX = "timing_s/"  # verl's phase timers: timing_s/<phase>
STEP_TIME = TIMING_PREFIX + "step"
GEN_TIME = TIMING_PREFIX + "gen"  # verl's rollout timer of a training step
TEST_TIME = TIMING_PREFIX + "testing"  # verl's validation timer (v1 trainer_base.fit)
ACTOR_PREFIX = "actor/"
TOKEN_ENTROPY = ACTOR_PREFIX + "entropy"
ACTOR_PG_LOSS = ACTOR_PREFIX + "pg_loss"
ACTOR_ENTROPY_LOSS = ACTOR_PREFIX + "entropy_loss"
ACTOR_GRAD_NORM = ACTOR_PREFIX + "grad_norm"
ACTOR_LR = ACTOR_PREFIX + "lr"
# DAPO's group filtering: responses generated and then thrown away
FILTER_GROUPS_EVICTED = "training/filter_groups/evicted_samples"
FILTER_GROUPS_DISCARDED_SURPLUS = "training/filter_groups/discarded_surplus_samples"
FILTER_GROUPS_DISCARDED = (FILTER_GROUPS_EVICTED, FILTER_GROUPS_DISCARDED_SURPLUS)
GENERATED_SAMPLES = "training/generated_samples"  # responses generated, kept or not
# the run so far, written only under a budget in generated samples (recipe/study/fast/budget.py)
CUMULATIVE_GENERATED_SAMPLES = "training/cumulative_generated_samples"
SAMPLE_BUDGET = "training/sample_budget"  # the run's budget in generated samples (same rows)
GENERATION_ROUNDS = "training/generation_rounds"  # DAPO's generation rounds of a step

# the fast study trainer (recipe/study/fast/run.py): wall and CPU seconds, and the group census
PERF_STEP_WALL_S = "perf/step_wall_s"
PERF_STEP_CPU_S = "perf/step_cpu_s"
PERF_VAL_WALL_S = "perf/val_wall_s"
PERF_VAL_CPU_S = "perf/val_cpu_s"
GROUPS_PREFIX = "groups/"  # groups/<task>/{count,all_correct,all_wrong,zero_variance,accuracy}
GROUPS_ALL = "all"  # the <task> of every group together
GROUPS_ALL_ZERO_VARIANCE = f"{GROUPS_PREFIX}{GROUPS_ALL}/zero_variance"


def group_prefix(task: str) -> str:
    """``groups/<task>/``: the prefix of one task's group census (``GROUPS_ALL`` for all tasks)."""
    return f"{GROUPS_PREFIX}{task}/"


# the recipe: each name is a prefix and the key its copo_core function returns
COPO_KEYS = tuple(COPO_PREFIX + key for key in _core.COPO_METRIC_KEYS)
SIGNAL_KEYS = tuple(SIGNAL_PREFIX + key for key in _core.SIGNAL_METRIC_KEYS)
GCPO_KEYS = tuple(GCPO_PREFIX + key for key in _gcpo.GCPO_METRIC_KEYS)
MECHANISM_KEYS = tuple(MECHANISM_PREFIX + key for key in _mechanism.MECHANISM_METRIC_KEYS)
# per success bin of mixed groups: (mean advantage of their wrong answers, how many)
MECHANISM_MIXED_BINS = tuple(
    (MECHANISM_PREFIX + m, MECHANISM_PREFIX + c) for m, c in _mechanism.MIXED_BIN_KEYS
)
MECHANISM_WRONG_ADV_ALL_WRONG = MECHANISM_PREFIX + _mechanism.WRONG_ADV_ALL_WRONG
MECHANISM_NUM_WRONG_ALL_WRONG = MECHANISM_PREFIX + _mechanism.NUM_WRONG_ALL_WRONG
MECHANISM_WRONG_ADV_MIXED = MECHANISM_PREFIX + _mechanism.WRONG_ADV_MIXED
MECHANISM_NUM_WRONG_MIXED = MECHANISM_PREFIX + _mechanism.NUM_WRONG_MIXED
# the shares of group kinds, and every (mean advantage of wrong answers, how many) pair: all-wrong
# groups, mixed groups, then each success bin of mixed groups
MECHANISM_GROUP_SHARES = tuple(
    MECHANISM_PREFIX + k
    for k in (
        _mechanism.FRAC_GROUPS_ALL_WRONG,
        _mechanism.FRAC_GROUPS_MIXED,
        _mechanism.FRAC_GROUPS_ALL_CORRECT,
    )
)
MECHANISM_WRONG_ADV = (
    (MECHANISM_WRONG_ADV_ALL_WRONG, MECHANISM_NUM_WRONG_ALL_WRONG),
    (MECHANISM_WRONG_ADV_MIXED, MECHANISM_NUM_WRONG_MIXED),
    *MECHANISM_MIXED_BINS,
)
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
