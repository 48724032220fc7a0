#!/usr/bin/env bash
# DAPO baseline with run_copo_qwen2.5_3b.sh's model, data, batch and step settings:
# verl's grpo estimator + vanilla loss with DAPO's changes: clip-higher 0.2/0.28 (dual clip 10),
# token-mean aggregation, dynamic sampling (group filtering on the reward's `acc`), the overlong
# length penalty and no KL term. The overrides live in _run_dapo.sh (shared with the other size).
#
#   bash recipe/copo/run_dapo_qwen2.5_3b.sh [hydra overrides...]
#   DRY_RUN=1 bash recipe/copo/run_dapo_qwen2.5_3b.sh ...    # print the command only
#
# Env vars: those of run_copo_qwen2.5_3b.sh, plus OVERLONG_BUFFER_LEN [512],
# OVERLONG_PENALTY [1.0], MAX_RESPONSE_LEN [2048], MAX_INFLIGHT_GEN_BATCHES [4].
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -euo pipefail
SIZE=3b exec bash "$(dirname "${BASH_SOURCE[0]}")/_run_dapo.sh" "$@"
