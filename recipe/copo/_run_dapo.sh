#!/usr/bin/env bash
# DAPO baseline with run_copo_qwen2.5_<SIZE>.sh's model, data, batch and step settings:
# verl's grpo estimator + vanilla loss with DAPO's changes: clip-higher 0.2/0.28 (dual clip 10),
# token-mean aggregation, dynamic sampling (group filtering on the reward's `acc`), the overlong
# length penalty (buffer OVERLONG_BUFFER_LEN tokens, factor OVERLONG_PENALTY) and no KL term.
#
# Shared body of run_dapo_qwen2.5_7b.sh and run_dapo_qwen2.5_3b.sh (run those; or
# SIZE=3b bash recipe/copo/_run_dapo.sh [hydra overrides...]):
#   bash recipe/copo/run_dapo_qwen2.5_7b.sh [hydra overrides...]
#   DRY_RUN=1 bash recipe/copo/run_dapo_qwen2.5_3b.sh ...    # print the command only
#
# Env vars: SIZE [7b] (7b or 3b), those of run_copo_qwen2.5_<SIZE>.sh, plus OVERLONG_BUFFER_LEN [512],
# OVERLONG_PENALTY [1.0], MAX_RESPONSE_LEN [2048], MAX_INFLIGHT_GEN_BATCHES [4].
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -xeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SIZE=${SIZE:-7b}
case "$SIZE" in
  7b | 3b) ;;
  *) echo "_run_dapo.sh: SIZE must be 7b or 3b (got '$SIZE')" >&2; exit 2 ;;
esac
export ADV_ESTIMATOR=grpo
export LOSS_MODE=vanilla
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-dapo_qwen2.5_$SIZE}
export MAX_RESPONSE_LEN=${MAX_RESPONSE_LEN:-2048}
OVERLONG_BUFFER_LEN=${OVERLONG_BUFFER_LEN:-512}
OVERLONG_PENALTY=${OVERLONG_PENALTY:-1.0}
MAX_INFLIGHT_GEN_BATCHES=${MAX_INFLIGHT_GEN_BATCHES:-4}
DAPO_ARGS=(
  actor_rollout_ref.actor.clip_ratio_low=0.2
  actor_rollout_ref.actor.clip_ratio_high=0.28
  actor_rollout_ref.actor.clip_ratio_c=10.0
  actor_rollout_ref.actor.loss_agg_mode=token-mean
  actor_rollout_ref.actor.use_kl_loss=false
  actor_rollout_ref.actor.kl_loss_coef=0.0
  algorithm.use_kl_in_reward=false
  algorithm.filter_groups.enable=true
  algorithm.filter_groups.metric=acc
  algorithm.filter_groups.max_inflight_gen_batches="$MAX_INFLIGHT_GEN_BATCHES"
  reward.reward_manager.name=dapo
  +reward.reward_kwargs.max_resp_len="$MAX_RESPONSE_LEN"
  +reward.reward_kwargs.overlong_buffer_cfg.enable=true
  +reward.reward_kwargs.overlong_buffer_cfg.len="$OVERLONG_BUFFER_LEN"
  +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor="$OVERLONG_PENALTY"
  +reward.reward_kwargs.overlong_buffer_cfg.log=false
)
export EXTRA_ARGS="${DAPO_ARGS[*]} ${EXTRA_ARGS:-}"
exec bash "$HERE/run_copo_qwen2.5_$SIZE.sh" "$@"
