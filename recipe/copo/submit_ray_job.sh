#!/usr/bin/env bash
# Submit a recipe/copo run to a running Ray cluster: kept for old command lines, it is
# scripts/cluster/submit.sh (the one submitter: validates the config, forwards the path and shape
# variables, see its --help) with the run script's config.
#
#   bash recipe/copo/submit_ray_job.sh recipe/copo/run_copo_qwen2.5_7b.sh [hydra overrides...]
#   DRY_RUN=1 bash recipe/copo/submit_ray_job.sh recipe/copo/run_grpo_qwen2.5_7b.sh   # print only
#
# RUN_SCRIPT must be a recipe/copo/run_<config>.sh; the ablation script's equivalent is
# `scripts/cluster/submit.sh --config copo_qwen2.5_7b -- +ablation=<mode>`.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
if [ "$#" -lt 1 ]; then
  echo "usage: bash recipe/copo/submit_ray_job.sh RUN_SCRIPT [hydra overrides...]" >&2
  exit 2
fi
name=$(basename "$1" .sh)
config=${name#run_}
shift
if [ "$name" = "$config" ] || [ ! -f "$(dirname "${BASH_SOURCE[0]}")/config/$config.yaml" ]; then
  echo "submit_ray_job.sh: '$name' is not a recipe/copo/run_<config>.sh of a named config" >&2
  exit 2
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/../../scripts/cluster/submit.sh" --config "$config" -- "$@"
