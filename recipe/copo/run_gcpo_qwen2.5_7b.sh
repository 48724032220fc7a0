#!/usr/bin/env bash
# GCPO on Qwen2.5-7B-Instruct: the settings of run_copo_qwen2.5_7b.sh (n=8, 512 prompts/step,
# lr 1e-6, clip 0.2/0.2, KL loss 0.001, seq-mean-token-mean, 70 steps, DAPO-Math-17k) with
# GCPO's cooperative advantage (algorithm.adv_estimator=gcpo, SPEC section 8) and verl's
# vanilla PPO loss.
#
#   bash recipe/copo/run_gcpo_qwen2.5_7b.sh [hydra overrides...]      # extra args win (passed last)
#   DRY_RUN=1 bash recipe/copo/run_gcpo_qwen2.5_7b.sh ...             # print the command only
#
# COPO with GCPO's advantage as its local term instead:
#   bash recipe/copo/run_copo_qwen2.5_7b.sh algorithm.copo.local_estimator=gcpo
#
# Env vars: those of run_copo_qwen2.5_7b.sh (ADV_ESTIMATOR/LOSS_MODE are fixed here), plus
#   GCPO_ALPHA [1.0]  GCPO_BETA [1.0]  GCPO_EXACT_MAX_G [10]  GCPO_NUM_PERMUTATIONS [64]
#   GCPO_EMBEDDER [minilm]: minilm | a local sentence-transformers model folder | hash (smoke tests)
#   GCPO_EMBED_BATCH_SIZE [64]
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -xeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ADV_ESTIMATOR=gcpo
export LOSS_MODE=vanilla
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-gcpo_qwen2.5_7b}

exec bash "$HERE/run_copo_qwen2.5_7b.sh" \
  algorithm.gcpo.alpha="${GCPO_ALPHA:-1.0}" \
  algorithm.gcpo.beta="${GCPO_BETA:-1.0}" \
  algorithm.gcpo.exact_max_g="${GCPO_EXACT_MAX_G:-10}" \
  algorithm.gcpo.num_permutations="${GCPO_NUM_PERMUTATIONS:-64}" \
  algorithm.gcpo.embedder="${GCPO_EMBEDDER:-minilm}" \
  algorithm.gcpo.embed_batch_size="${GCPO_EMBED_BATCH_SIZE:-64}" \
  "$@"
