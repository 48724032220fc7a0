#!/usr/bin/env bash
# Start a Ray worker node on this machine and join it to a running copo-verl head.
#
# Usage: HEAD_ADDRESS=10.0.0.1:6379 bash scripts/cluster/start_worker.sh [--env-file FILE] [--dry-run]
#                                                                        [-- EXTRA_RAY_START_ARGS...]
#        bash scripts/cluster/start_worker.sh --help     # this text
#
# Environment (defaults in brackets; an --env-file / ENV_FILE with KEY=VALUE lines is loaded first,
# values already set in the environment win; template: scripts/cluster/cluster.env.example):
#   HEAD_ADDRESS     head's GCS address, IP:PORT (required; printed by start_head.sh)
#   GPUS_PER_NODE    GPUs Ray may use on this node             [detected with nvidia-smi]
#   NUM_CPUS         CPUs Ray may use on this node             [Ray's detection]
#   NODE_IP          this node's address                       [detected, as in start_head.sh]
#   DASHBOARD_AGENT_PORT  HTTP port of this node's dashboard agent (job submission goes through
#                    the head's; must be free on the node)   [52365]
#   RAY_TEMP_DIR     Ray's session/log directory (keep short)  [/tmp/ray_copo_$USER]
#   RAY_AUTH_TOKEN_PATH  the head's token file, copied here     [~/.ray/auth_token; required:
#                    token authentication is always on, see docs/CLUSTER.md, "Who may use the cluster"]
#   WAIT_FOR_HEAD_S  seconds to wait for the head's port to answer [300]
#   RAY_START_ATTEMPTS  tries of `ray start` (a loaded node can miss Ray's 30 s startup wait) [3]
#   SKIP_ENV_CHECK   1 skips the verl-version check            [0]
#   REQUIRE_CUDA     0: the GPUs are Ray resources only, CUDA need not see them (CPU rehearsal) [1]
#   BLOCK            1 keeps this script in the foreground until Ray exits (Slurm/srun steps,
#                    containers); 0 returns once Ray is up           [0]
#   DRY_RUN          1 prints the `ray start` command and exits [0]
# Stop with: bash scripts/cluster/stop.sh (on this node).
set -euo pipefail
# shellcheck source=scripts/cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

parse_start_args "$@"

DRY_RUN=${DRY_RUN:-0}
BLOCK=${BLOCK:-0}
[ -n "${HEAD_ADDRESS:-}" ] || die "HEAD_ADDRESS is not set: export HEAD_ADDRESS=<head ip>:<RAY_PORT> \
(start_head.sh prints it)"
[[ "$HEAD_ADDRESS" =~ ^[^:]+:[0-9]+$ ]] || die "HEAD_ADDRESS='$HEAD_ADDRESS' must look like IP:PORT"
RAY_TEMP_DIR=${RAY_TEMP_DIR:-/tmp/ray_copo_${USER:-$(id -un)}}
DASHBOARD_AGENT_PORT=${DASHBOARD_AGENT_PORT:-52365}
require_int DASHBOARD_AGENT_PORT "$DASHBOARD_AGENT_PORT"
GPUS_PER_NODE=${GPUS_PER_NODE:-$(detect_gpus)}
NODE_IP=${NODE_IP:-$(detect_ip)}
WAIT_FOR_HEAD_S=${WAIT_FOR_HEAD_S:-300}
for v in GPUS_PER_NODE WAIT_FOR_HEAD_S; do require_int "$v" "${!v}"; done
[ -z "${NUM_CPUS:-}" ] || require_int NUM_CPUS "$NUM_CPUS"
[ "${#RAY_TEMP_DIR}" -le 48 ] || die "RAY_TEMP_DIR='$RAY_TEMP_DIR' is too long for Ray's socket paths (max 48 chars)"

RAY="$(ray_bin)"
# Sets CMD (common.sh); with DRY_RUN=1 it prints the command and exits.
ray_start_cmd --address="$HEAD_ADDRESS" --node-ip-address="$NODE_IP"

refuse_if_running worker
check_node_env "$GPUS_PER_NODE"
use_cluster_token worker

# On Slurm and similar, workers often come up before the head: wait until its port answers.
mkdir -p "$RAY_TEMP_DIR"
wait_for_port "${HEAD_ADDRESS%:*}" "${HEAD_ADDRESS##*:}" "$WAIT_FOR_HEAD_S" \
  || die "head $HEAD_ADDRESS not reachable within ${WAIT_FOR_HEAD_S}s (is start_head.sh running there, \
and is port ${HEAD_ADDRESS##*:} open from $NODE_IP?)"
launch_ray worker "$RAY_TEMP_DIR" "" "${CMD[@]}"
log "worker $NODE_IP joined $HEAD_ADDRESS with $GPUS_PER_NODE GPU(s)"
