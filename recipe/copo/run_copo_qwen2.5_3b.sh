#!/usr/bin/env bash
# COPO on Qwen2.5-3B-Instruct with the paper's settings (SPEC section 7): n=6, k=20, b=1.5,
# soft_with_zero; everything else as run_copo_qwen2.5_7b.sh (which this script runs).
#
#   bash recipe/copo/run_copo_qwen2.5_3b.sh [hydra overrides...]
#   DRY_RUN=1 bash recipe/copo/run_copo_qwen2.5_3b.sh ...    # print the command only
#
# Env vars: those of run_copo_qwen2.5_7b.sh; defaults changed here:
#   MODEL_PATH [Qwen/Qwen2.5-3B-Instruct]  ROLLOUT_N [6]  COPO_K [20]  COPO_B [1.5]  TP_SIZE [1]
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -xeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}
export ROLLOUT_N=${ROLLOUT_N:-6}
export COPO_K=${COPO_K:-20}
export COPO_B=${COPO_B:-1.5}
export TP_SIZE=${TP_SIZE:-1}
export ADV_ESTIMATOR=${ADV_ESTIMATOR:-copo}
export LOSS_MODE=${LOSS_MODE:-copo}
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-${ADV_ESTIMATOR}_qwen2.5_3b_n${ROLLOUT_N}_k${COPO_K}_b${COPO_B}}
exec bash "$HERE/run_copo_qwen2.5_7b.sh" "$@"
