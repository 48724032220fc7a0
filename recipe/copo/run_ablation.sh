#!/usr/bin/env bash
# COPO blend-mode ablations (SPEC section 4) on one of the paper's set-ups, one script for all:
#
#   ABLATION=global_only bash recipe/copo/run_ablation.sh [hydra overrides...]
#   ABLATION=soft SIZE=3b bash recipe/copo/run_ablation.sh
#   DRY_RUN=1 ABLATION=zero bash recipe/copo/run_ablation.sh     # print the command only
#
# ABLATION: global_only | soft | soft_with_forced | zero | forced | soft_with_zero | local_only
#   (soft_with_zero is the main COPO run; local_only is COPO's GRPO-equivalent mode).
# SIZE [7b]: 7b or 3b (which run_copo_qwen2.5_<SIZE>.sh supplies the settings).
# Other env vars: those of run_copo_qwen2.5_7b.sh.
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -xeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ABLATION=${ABLATION:-}
SIZE=${SIZE:-7b}
case "$ABLATION" in
  global_only | soft | soft_with_forced | zero | forced | soft_with_zero | local_only) ;;
  *)
    echo "run_ablation.sh: set ABLATION to one of global_only soft soft_with_forced zero forced soft_with_zero local_only (got '$ABLATION')" >&2
    exit 2
    ;;
esac
case "$SIZE" in
  7b | 3b) ;;
  *)
    echo "run_ablation.sh: SIZE must be 7b or 3b (got '$SIZE')" >&2
    exit 2
    ;;
esac
export BLEND_MODE=$ABLATION
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-copo_${ABLATION}_qwen2.5_${SIZE}}
exec bash "$HERE/run_copo_qwen2.5_${SIZE}.sh" "$@"
