#!/usr/bin/env bash
# GRPO baseline for run_copo_qwen2.5_3b.sh: same settings, verl's own grpo estimator and
# vanilla loss (what COPO's blend_mode=local_only reduces to), same launcher, reward and metrics.
#
#   bash recipe/copo/run_grpo_qwen2.5_3b.sh [hydra overrides...]
#   DRY_RUN=1 bash recipe/copo/run_grpo_qwen2.5_3b.sh ...    # print the command only
#
# Env vars: those of run_copo_qwen2.5_3b.sh (ADV_ESTIMATOR/LOSS_MODE are fixed here).
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -xeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ADV_ESTIMATOR=grpo
export LOSS_MODE=vanilla
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-grpo_qwen2.5_3b}
exec bash "$HERE/run_copo_qwen2.5_3b.sh" "$@"
