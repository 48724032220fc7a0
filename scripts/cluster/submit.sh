#!/usr/bin/env bash
# Submit a copo-verl run (a named config of recipe/copo/config/) as a Ray job to a running cluster.
#
# Usage: bash scripts/cluster/submit.sh [--config NAME] [--env-file FILE] [--dry-run] [--no-wait]
#                                       [--] [HYDRA_OVERRIDES...]
#   e.g. RAY_ADDRESS=http://10.0.0.1:8265 NNODES=2 DATA_DIR=/shared/data/copo CKPT_DIR=/shared/ckpts \
#          bash scripts/cluster/submit.sh --config copo_qwen2.5_7b -- trainer.total_training_steps=70
#
# The job runs `$PYTHON -m recipe.copo.main_copo --config-name NAME OVERRIDES` inside WORKING_DIR,
# which Ray uploads to the cluster, with the runtime env RUNTIME_ENV plus the path and shape variables
# set here (MODEL_PATH DATA_DIR CKPT_DIR NNODES GPUS_PER_NODE, the only ones the configs read) as its
# env_vars, so every process of the job, on every node, reads the same values. Before submitting,
# scripts/cluster/validate_job.py composes and validates exactly that command with exactly those
# variables: what is checked is what trains. It then streams the job's logs and exits 0 only if the job
# SUCCEEDED; SIGTERM or Ctrl-C (once or more) stops the job on the cluster first (`ray job stop`).
# Secrets are never forwarded (they would show in the job's command line): put WANDB_API_KEY etc. in
# the env file of start_head.sh / start_worker.sh.
#
# Environment (defaults in brackets; --env-file / ENV_FILE is loaded first, set values win):
#   RAY_ADDRESS     job-submission address of the head      [on the head's node: the dashboard
#                   address start_head.sh recorded; elsewhere http://127.0.0.1:8265]
#   CONFIG          config name (--config)                  [copo_qwen2.5_7b]
#   MODEL_PATH DATA_DIR CKPT_DIR NNODES GPUS_PER_NODE   forwarded to the job when set (see the config)
#   PYTHON          interpreter with the project, here (validation) and for the job [python3]
#   JOB_PYTHON      the job's interpreter on the cluster, when it differs from PYTHON [PYTHON]
#   RUNTIME_ENV     Ray runtime_env YAML                    [recipe/copo/runtime_env.yaml]
#   WORKING_DIR     directory uploaded as the job's cwd     [repository root]
#   SUBMISSION_ID   Ray submission id                       [copo-<UTC timestamp>]
#   VALIDATE        1 validates the config before submitting [1]
#   NO_WAIT         1 returns after submission (no log streaming) [0]
#   STOP_TIMEOUT_S  how long a stop signal waits for `ray job stop` [120]
#   SUBMIT_RETRIES  attempts while a fresh head's job agent is not up yet [6]
#   DRY_RUN         1 prints the `ray job submit` command as one shell-quoted line and exits [0]
#   RAY_AUTH_TOKEN_PATH  the cluster's token file (the head's, copied here) [~/.ray/auth_token]
# The cluster runs with token authentication (start_head.sh): the submission carries the token from
# RAY_AUTH_TOKEN_PATH (or RAY_AUTH_TOKEN), never on a command line; without it the head refuses the job.
set -euo pipefail
# A background launch inherits SIGINT ignored, which bash cannot trap: restart with the defaults.
# shellcheck source=scripts/default_signals.sh
source "$(dirname "$0")/../default_signals.sh"
# shellcheck source=scripts/cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OVERRIDES=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage_from_header "$0"; exit 0 ;;
    --config) [ $# -ge 2 ] || die "--config needs a name"; CONFIG=$2; shift 2 ;;
    --run-script) die "--run-script is gone: submit a named config with --config NAME \
(recipe/copo/run_NAME.sh runs recipe/copo/config/NAME.yaml)" ;;
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
RAY_ADDRESS=${RAY_ADDRESS:-$(recorded_dashboard_url)}
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}
WORKING_DIR=${WORKING_DIR:-$COPO_ROOT}
CONFIG=${CONFIG:-copo_qwen2.5_7b}
RUNTIME_ENV=${RUNTIME_ENV:-$COPO_ROOT/recipe/copo/runtime_env.yaml}
JOB_PYTHON=${JOB_PYTHON:-${PYTHON:-python3}}
SUBMISSION_ID=${SUBMISSION_ID:-copo-$(date -u +%Y%m%d-%H%M%S)}
for v in NNODES GPUS_PER_NODE; do [ -z "${!v+x}" ] || require_int "$v" "${!v}"; done

[ -d "$WORKING_DIR" ] || die "WORKING_DIR='$WORKING_DIR' is not a directory"
WORKING_DIR="$(cd "$WORKING_DIR" && pwd)"
if [ ! -f "$COPO_ROOT/recipe/copo/config/$CONFIG.yaml" ]; then
  choices=("$COPO_ROOT"/recipe/copo/config/*.yaml)
  choices=("${choices[@]##*/}")
  die "CONFIG='$CONFIG' is not a config of recipe/copo/config/ (choose one of: ${choices[*]%.yaml})"
fi
[ -f "$RUNTIME_ENV" ] || die "RUNTIME_ENV='$RUNTIME_ENV' does not exist (the recipe ships recipe/copo/runtime_env.yaml)"

# The one forward list (common.sh): the job gets these variables, and nothing else from this shell.
ENV_ARGS=()
for name in $COPO_JOB_ENV_VARS; do
  if [ -n "${!name+x}" ]; then ENV_ARGS+=(--env "$name=${!name}"); fi
done
ENTRYPOINT=("$JOB_PYTHON" -m recipe.copo.main_copo --config-name "$CONFIG" "${OVERRIDES[@]}")
CHECK=()
if [ "$VALIDATE" != "1" ] || [ "$DRY_RUN" = "1" ]; then CHECK=(--no-check); fi
if [ "${#CHECK[@]}" -eq 0 ]; then log "validating the job's config locally (VALIDATE=0 skips)"; fi
# validate_job.py composes ENTRYPOINT with exactly these variables and prints the runtime env to submit.
RUNTIME_JSON="$("$(python_bin)" "$COPO_ROOT/scripts/cluster/validate_job.py" --runtime-env "$RUNTIME_ENV" \
  "${ENV_ARGS[@]}" "${CHECK[@]}" -- "${ENTRYPOINT[@]}")" \
  || die "config validation failed (above); fix the overrides, the config or the variables before submitting"

# Submitted without waiting; this script then follows the job itself (follow_job), so that a stop
# signal can stop the job (below) instead of leaving it running on the cluster.
CMD=("$(ray_bin)" job submit
  --address="$RAY_ADDRESS"
  --submission-id="$SUBMISSION_ID"
  --working-dir="$WORKING_DIR"
  --runtime-env-json="$RUNTIME_JSON"
  --no-wait
  -- "${ENTRYPOINT[@]}")

if [ "$DRY_RUN" = "1" ]; then
  print_cmd "${CMD[@]}"
  exit 0
fi

use_cluster_token client
log "submitting config $CONFIG to $RAY_ADDRESS as $SUBMISSION_ID"
log "$(print_cmd "${CMD[@]}")"
errlog="$(mktemp "${TMPDIR:-/tmp}/copo_submit.XXXXXX")"
trap 'rm -f "$errlog"' EXIT

# A stop signal (Ctrl-C and Slurm's scancel reach the whole process group; `timeout` and `docker stop`
# this script alone) stops the job on the cluster, then exits 128 + the signal. Further signals are
# ignored meanwhile (so is every command the clean-up starts: ignored signals are inherited), so a
# second Ctrl-C cannot cut the stop short and leave the job training.
CHILD=""
stop_job() {
  local sig=$1
  trap '' TERM INT HUP
  if [ -n "$CHILD" ]; then
    # shellcheck disable=SC2046  # the PIDs are words
    kill -TERM $(descendants "$CHILD") 2>/dev/null || true
  fi
  log "$sig: stopping job $SUBMISSION_ID on $RAY_ADDRESS (ray job stop waits until it has stopped)"
  timeout "${STOP_TIMEOUT_S:-120}" "$(ray_bin)" job stop --address="$RAY_ADDRESS" "$SUBMISSION_ID" >&2 \
    || log "ray job stop failed or timed out; check: ray job status --address=$RAY_ADDRESS $SUBMISSION_ID"
  exit $((128 + $(kill -l "$sig")))
}
trap 'stop_job TERM' TERM
trap 'stop_job INT' INT
trap 'stop_job HUP' HUP

# run_child CMD...: CMD in the background, waited for, so that a trap runs at once (bash runs traps
# only between commands, never while a foreground child runs).
run_child() {
  local rc=0
  "$@" &
  CHILD=$!
  wait "$CHILD" || rc=$?
  CHILD=""
  return "$rc"
}

# A head that has just started may not have registered its job agent yet ("No available agent to
# submit job"): nothing was submitted then, so retry; any other failure is final.
for attempt in $(seq 1 "${SUBMIT_RETRIES:-6}"); do
  rc=0
  run_child "${CMD[@]}" 2>"$errlog" || rc=$?
  cat "$errlog" >&2
  if [ "$rc" -eq 0 ]; then break; fi
  grep -q "No available agent to submit job" "$errlog" || exit "$rc"
  [ "$attempt" -lt "${SUBMIT_RETRIES:-6}" ] \
    || die "the head at $RAY_ADDRESS never accepted the job (no job agent); check its dashboard logs"
  log "the head's job agent is not up yet (attempt $attempt); retrying in 10 s"
  sleep 10
done
if [ "$NO_WAIT" = "1" ]; then
  log "submitted; follow it with: ray job logs --follow --address=$RAY_ADDRESS $SUBMISSION_ID"
  exit 0
fi
# Stream the job's logs until it ends: exit 0 if it SUCCEEDED, 1 otherwise (common.sh).
run_child follow_job "$RAY_ADDRESS" "$SUBMISSION_ID"
