#!/usr/bin/env bash
# Submit a copo-verl run script as a Ray job to a running cluster (see start_head.sh).
#
# Usage: bash scripts/cluster/submit.sh [--run-script PATH] [--env-file FILE] [--dry-run] [--no-wait]
#                                       [--] [HYDRA_OVERRIDES...]
#   e.g. RAY_ADDRESS=http://10.0.0.1:8265 NNODES=2 bash scripts/cluster/submit.sh \
#          --run-script recipe/copo/run_copo_qwen2.5_7b.sh -- trainer.total_training_steps=70
#
# The job runs `env FORWARDED_VARS... bash RUN_SCRIPT trainer.nnodes=$NNODES
# trainer.n_gpus_per_node=$GPUS_PER_NODE OVERRIDES` inside WORKING_DIR, which Ray uploads to the
# cluster; the run script's `python -m recipe.copo.main_copo` then joins the cluster through the
# job's RAY_ADDRESS. The run scripts' settings you export here (MODEL_PATH, DATA_DIR, ROLLOUT_N ...,
# see FORWARD_VARS) are passed on; secrets are not (they would show in the job's command line):
# put WANDB_API_KEY etc. in the env file of start_head.sh / start_worker.sh instead.
# Before submitting, the composed config is validated locally (the run script's DRY_RUN=1 command
# through recipe/copo/config_check.py), so a typo fails here and not after the cluster has started.
#
# Environment (defaults in brackets; --env-file / ENV_FILE is loaded first, set values win):
#   RAY_ADDRESS     job-submission address of the head      [http://127.0.0.1:8265]
#   RUN_SCRIPT      run script, relative to WORKING_DIR     [recipe/copo/run_copo_qwen2.5_7b.sh]
#   RUNTIME_ENV     Ray runtime_env YAML                    [recipe/copo/runtime_env.yaml]
#   WORKING_DIR     directory uploaded as the job's cwd     [repository root]
#   NNODES          nodes the trainer uses                  [1]
#   GPUS_PER_NODE   GPUs per node the trainer uses          [8]
#   SUBMISSION_ID   Ray submission id                       [copo-<UTC timestamp>]
#   FORWARD_VARS    run-script variables passed to the job when set here [MODEL_PATH DATA_DIR ...]
#   VALIDATE        1 validates the config before submitting [1]
#   NO_WAIT         1 returns after submission (no log streaming) [0]
#   SUBMIT_RETRIES  attempts while a fresh head's job agent is not up yet [6]
#   DRY_RUN         1 prints the `ray job submit` command as one shell-quoted line and exits [0]
# Ray token authentication (Ray >= 2.5x enables it by default when a token exists): with RAY_AUTH_MODE
# unset and a token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, this sets
# RAY_AUTH_MODE=token for the client, as the head does (otherwise `ray job submit` is refused).
set -euo pipefail
# shellcheck source=scripts/cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OVERRIDES=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage_from_header "$0"; exit 0 ;;
    --run-script) [ $# -ge 2 ] || die "--run-script needs a path"; RUN_SCRIPT=$2; shift 2 ;;
    --env-file) [ $# -ge 2 ] || die "--env-file needs a path"; ENV_FILE=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --no-wait) NO_WAIT=1; shift ;;
    --) shift; OVERRIDES+=("$@"); break ;;
    -*) die "unknown option '$1' (see --help; Hydra overrides go after --)" ;;
    *) OVERRIDES+=("$1"); shift ;;
  esac
done
if [ -n "${ENV_FILE:-}" ]; then load_env_file "$ENV_FILE"; fi

DRY_RUN=${DRY_RUN:-0}
NO_WAIT=${NO_WAIT:-0}
VALIDATE=${VALIDATE:-1}
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}
WORKING_DIR=${WORKING_DIR:-$COPO_ROOT}
RUN_SCRIPT=${RUN_SCRIPT:-recipe/copo/run_copo_qwen2.5_7b.sh}
RUNTIME_ENV=${RUNTIME_ENV:-$COPO_ROOT/recipe/copo/runtime_env.yaml}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
SUBMISSION_ID=${SUBMISSION_ID:-copo-$(date -u +%Y%m%d-%H%M%S)}
require_int NNODES "$NNODES"
require_int GPUS_PER_NODE "$GPUS_PER_NODE"
[ "$NNODES" -ge 1 ] || die "NNODES must be >= 1"

[ -d "$WORKING_DIR" ] || die "WORKING_DIR='$WORKING_DIR' is not a directory"
WORKING_DIR="$(cd "$WORKING_DIR" && pwd)"
# The job runs inside the uploaded WORKING_DIR, so the run script must live in it: use a relative path.
case "$RUN_SCRIPT" in
  "$WORKING_DIR"/*) RUN_SCRIPT="${RUN_SCRIPT#"$WORKING_DIR"/}" ;;
  /*) die "RUN_SCRIPT='$RUN_SCRIPT' is outside WORKING_DIR='$WORKING_DIR'; Ray only uploads WORKING_DIR" ;;
esac
if [ ! -f "$WORKING_DIR/$RUN_SCRIPT" ]; then
  choices=("$WORKING_DIR"/recipe/copo/run_*.sh)
  die "RUN_SCRIPT='$RUN_SCRIPT' not found in $WORKING_DIR (choose one of: ${choices[*]#"$WORKING_DIR"/})"
fi
[ -f "$RUNTIME_ENV" ] || die "RUNTIME_ENV='$RUNTIME_ENV' does not exist (the recipe ships recipe/copo/runtime_env.yaml)"

FORWARD_VARS=${FORWARD_VARS:-MODEL_PATH DATA_DIR TRAIN_FILES VAL_FILES CKPT_DIR PROJECT_NAME EXPERIMENT_NAME \
LOGGER ADV_ESTIMATOR LOSS_MODE BLEND_MODE COPO_K COPO_B ROLLOUT_N TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE TOTAL_STEPS \
MAX_PROMPT_LEN MAX_RESPONSE_LEN MICRO_BATCH_PER_GPU TP_SIZE GPU_MEM_UTIL ROLLOUT_NAME EXTRA_ARGS ABLATION SIZE}
JOB_ENV=(NNODES="$NNODES" GPUS_PER_NODE="$GPUS_PER_NODE")
read -r -a forward <<<"$FORWARD_VARS"
for name in "${forward[@]}"; do
  [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "FORWARD_VARS: '$name' is not a variable name"
  case "$name" in *KEY* | *TOKEN* | *SECRET* | *PASSWORD*) die "FORWARD_VARS: refusing to put $name on the job's command line" ;; esac
  if [ -n "${!name+x}" ]; then JOB_ENV+=("$name=${!name}"); fi
done
JOB_ARGS=(trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$GPUS_PER_NODE" "${OVERRIDES[@]}")
CMD=("$(ray_bin)" job submit
  --address="$RAY_ADDRESS"
  --submission-id="$SUBMISSION_ID"
  --runtime-env="$RUNTIME_ENV"
  --working-dir="$WORKING_DIR")
if [ "$NO_WAIT" = "1" ]; then CMD+=(--no-wait); fi
CMD+=(-- env "${JOB_ENV[@]}" bash "$RUN_SCRIPT" "${JOB_ARGS[@]}")

if [ "$DRY_RUN" = "1" ]; then
  print_cmd "${CMD[@]}"
  exit 0
fi

if [ "$VALIDATE" = "1" ]; then
  log "validating the job's config locally (VALIDATE=0 skips)"
  (cd "$WORKING_DIR" && env "${JOB_ENV[@]}" "$(python_bin)" "$COPO_ROOT/scripts/cluster/validate_job.py" \
    --working-dir "$WORKING_DIR" "$RUN_SCRIPT" "${JOB_ARGS[@]}") \
    || die "config validation failed (above); fix the overrides or the run script before submitting"
fi
if [ -z "${RAY_AUTH_MODE:-}" ] \
  && { [ -n "${RAY_AUTH_TOKEN:-}" ] || [ -f "${RAY_AUTH_TOKEN_PATH:-${HOME:-/nonexistent}/.ray/auth_token}" ]; }; then
  export RAY_AUTH_MODE=token
  log "Ray auth token found: RAY_AUTH_MODE=token for the submission"
fi
log "submitting $RUN_SCRIPT to $RAY_ADDRESS as $SUBMISSION_ID"
log "$(print_cmd "${CMD[@]}")"
# A head that has just started may not have registered its job agent yet ("No available agent to
# submit job"): nothing was submitted then, so retry; any other failure is final.
errlog="$(mktemp "${TMPDIR:-/tmp}/copo_submit.XXXXXX")"
trap 'rm -f "$errlog"' EXIT
for attempt in $(seq 1 "${SUBMIT_RETRIES:-6}"); do
  rc=0
  "${CMD[@]}" 2> >(tee "$errlog" >&2) || rc=$?
  wait # let tee flush before reading the log
  [ "$rc" -ne 0 ] && grep -q "No available agent to submit job" "$errlog" || exit "$rc"
  log "the head's job agent is not up yet (attempt $attempt); retrying in 10 s"
  sleep 10
done
die "the head at $RAY_ADDRESS never accepted the job (no job agent); check its dashboard logs"
