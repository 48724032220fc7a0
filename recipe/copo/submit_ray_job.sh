#!/usr/bin/env bash
# Submit any recipe/copo run script to a running Ray cluster as a Ray job.
#
#   bash recipe/copo/submit_ray_job.sh recipe/copo/run_copo_qwen2.5_7b.sh [hydra overrides...]
#   DRY_RUN=1 bash recipe/copo/submit_ray_job.sh recipe/copo/run_grpo_qwen2.5_7b.sh   # print only
#
# Run it from the repository root: the root is uploaded as the job's working_dir.
# Env vars:
#   RAY_ADDRESS [http://127.0.0.1:8265]   the cluster's dashboard (job server) address
#   RUNTIME_ENV [recipe/copo/runtime_env.yaml]
#   FORWARD_VARS [the run scripts' variables]  names of local env vars copied into the job's
#       env_vars when set here (MODEL_PATH, DATA_DIR, NNODES, ...), so the run script on the
#       cluster sees them.
#   SUBMIT_ARGS [""]  extra `ray job submit` options (whitespace separated), e.g. "--no-wait".
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -xeuo pipefail

if [ "$#" -lt 1 ]; then
  echo "usage: bash recipe/copo/submit_ray_job.sh RUN_SCRIPT [hydra overrides...]" >&2
  exit 2
fi
RUN_SCRIPT=$1
shift
if [ ! -f "$RUN_SCRIPT" ]; then
  echo "submit_ray_job.sh: run script '$RUN_SCRIPT' not found (run from the repository root)" >&2
  exit 2
fi

RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}
RUNTIME_ENV=${RUNTIME_ENV:-recipe/copo/runtime_env.yaml}
FORWARD_VARS=${FORWARD_VARS:-"MODEL_PATH DATA_DIR TRAIN_FILES VAL_FILES CKPT_DIR PROJECT_NAME EXPERIMENT_NAME NNODES GPUS_PER_NODE LOGGER ADV_ESTIMATOR LOSS_MODE BLEND_MODE COPO_K COPO_B ROLLOUT_N TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE TOTAL_STEPS MAX_PROMPT_LEN MAX_RESPONSE_LEN MICRO_BATCH_PER_GPU TP_SIZE GPU_MEM_UTIL ROLLOUT_NAME EXTRA_ARGS ABLATION SIZE OVERLONG_BUFFER_LEN OVERLONG_PENALTY MAX_INFLIGHT_GEN_BATCHES WANDB_API_KEY WANDB_MODE HF_HOME HF_HUB_OFFLINE"}
SUBMIT_ARGS=${SUBMIT_ARGS:-}
DRY_RUN=${DRY_RUN:-0}

# The runtime env actually submitted: the YAML plus the forwarded variables (single-quoted YAML).
# A dry run prints the static YAML's path instead (a temporary file would be gone by then).
JOB_ENV=$RUNTIME_ENV
if [ "$DRY_RUN" != "1" ]; then
  JOB_ENV=$(mktemp "${TMPDIR:-/tmp}/copo_runtime_env.XXXXXX.yaml")
  trap 'rm -f "$JOB_ENV"' EXIT
  cp "$RUNTIME_ENV" "$JOB_ENV"
  read -r -a FORWARD <<<"$FORWARD_VARS"
  for name in "${FORWARD[@]}"; do
    if [ -n "${!name+x}" ]; then
      value=${!name}
      printf "  %s: '%s'\n" "$name" "${value//\'/\'\'}" >>"$JOB_ENV"
    fi
  done
fi

read -r -a EXTRA_SUBMIT <<<"$SUBMIT_ARGS"
CMD=(
  ray job submit
  --address="$RAY_ADDRESS"
  --runtime-env="$JOB_ENV"
  ${EXTRA_SUBMIT[@]+"${EXTRA_SUBMIT[@]}"}
  --
  bash "$RUN_SCRIPT" "$@"
)

if [ "$DRY_RUN" = "1" ]; then
  printf '%q ' "${CMD[@]}"
  echo
  exit 0
fi
"${CMD[@]}"
