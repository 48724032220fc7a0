#!/usr/bin/env bash
# Start the Ray head node of a copo-verl cluster on this machine.
#
# Usage: bash scripts/cluster/start_head.sh [--env-file FILE] [--dry-run] [-- EXTRA_RAY_START_ARGS...]
#        bash scripts/cluster/start_head.sh --help     # this text
#
# Environment (defaults in brackets; an --env-file / ENV_FILE with KEY=VALUE lines is loaded first,
# values already set in the environment win; template: scripts/cluster/cluster.env.example):
#   GPUS_PER_NODE    GPUs Ray may use on this node             [detected with nvidia-smi]
#   NUM_CPUS         CPUs Ray may use on this node             [Ray's detection]
#   NODE_IP          address the other nodes reach this one at [detected, never loopback:
#                    NODE_IFNAME / GLOO_SOCKET_IFNAME's address, the default route's, `hostname -I`]
#   RAY_PORT         GCS port workers connect to               [6379]
#   DASHBOARD_PORT   dashboard and job-submission port         [8265]
#   DASHBOARD_HOST   address the dashboard (job submission) listens on [NODE_IP: the cluster network
#                    only; 0.0.0.0 would also open it on every other interface of the node]
#   RAY_AUTH_TOKEN_PATH  the cluster's token file              [~/.ray/auth_token; made, mode 0600,
#                    when missing. Token authentication is always on (RAY_AUTH_MODE=token): see
#                    docs/CLUSTER.md, "Who may use the cluster", for how the other nodes get the same token]
#   RAY_CLIENT_PORT  Ray client server port                    [10001]
#   DASHBOARD_AGENT_PORT  HTTP port of this node's dashboard agent (job submission goes through
#                    the head's; must be free on the node)   [52365]
#   RAY_TEMP_DIR     Ray's session/log directory (keep short)  [/tmp/ray_copo_$USER]
#   RAY_START_ATTEMPTS  tries of `ray start` (a loaded node can miss Ray's 30 s startup wait) [3]
#   SKIP_ENV_CHECK   1 skips the verl-version check            [0]
#   REQUIRE_CUDA     0: the GPUs are Ray resources only, CUDA need not see them (CPU rehearsal) [1]
#   BLOCK            1 keeps this script in the foreground until Ray exits (Slurm/srun steps,
#                    containers); 0 returns once Ray is up           [0]
#   DRY_RUN          1 prints the `ray start` command and exits [0]
# Variables exported by the env file (NCCL_SOCKET_IFNAME, HF_HOME, WANDB_API_KEY ...) are inherited by
# every Ray worker started on this node. Stop with: bash scripts/cluster/stop.sh
set -euo pipefail
# shellcheck source=scripts/cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

parse_start_args "$@"

DRY_RUN=${DRY_RUN:-0}
BLOCK=${BLOCK:-0}
RAY_PORT=${RAY_PORT:-6379}
DASHBOARD_PORT=${DASHBOARD_PORT:-8265}
RAY_CLIENT_PORT=${RAY_CLIENT_PORT:-10001}
RAY_TEMP_DIR=${RAY_TEMP_DIR:-/tmp/ray_copo_${USER:-$(id -un)}}
DASHBOARD_AGENT_PORT=${DASHBOARD_AGENT_PORT:-52365}
require_int DASHBOARD_AGENT_PORT "$DASHBOARD_AGENT_PORT"
GPUS_PER_NODE=${GPUS_PER_NODE:-$(detect_gpus)}
NODE_IP=${NODE_IP:-$(detect_ip)}
DASHBOARD_HOST=${DASHBOARD_HOST:-$NODE_IP}
for v in RAY_PORT DASHBOARD_PORT RAY_CLIENT_PORT GPUS_PER_NODE; do require_int "$v" "${!v}"; done
[ -z "${NUM_CPUS:-}" ] || require_int NUM_CPUS "$NUM_CPUS"
# Ray puts unix sockets under the temp dir; their paths must stay below 107 bytes.
[ "${#RAY_TEMP_DIR}" -le 48 ] || die "RAY_TEMP_DIR='$RAY_TEMP_DIR' is too long for Ray's socket paths (max 48 chars)"

RAY="$(ray_bin)"
# Sets CMD (common.sh); with DRY_RUN=1 it prints the command and exits.
ray_start_cmd --head \
  --node-ip-address="$NODE_IP" \
  --port="$RAY_PORT" \
  --dashboard-host="$DASHBOARD_HOST" \
  --dashboard-port="$DASHBOARD_PORT" \
  --ray-client-server-port="$RAY_CLIENT_PORT"

[ "$GPUS_PER_NODE" -gt 0 ] || log "WARNING: GPUS_PER_NODE=0: this head will schedule no GPU work"
refuse_if_running head
check_node_env "$GPUS_PER_NODE"
use_cluster_token head

mkdir -p "$RAY_TEMP_DIR"
log "starting Ray head on $NODE_IP:$RAY_PORT with $GPUS_PER_NODE GPU(s), dashboard on $DASHBOARD_HOST:$DASHBOARD_PORT"
# recorded in the state file: submit.sh on this node defaults to it
COPO_DASHBOARD_URL="http://$(url_host "$DASHBOARD_HOST"):$DASHBOARD_PORT"
export COPO_DASHBOARD_URL
launch_ray head "$RAY_TEMP_DIR" "$RAY_CLIENT_PORT" "${CMD[@]}"

cat >&2 <<EOF
[cluster] Ray head is up.
[cluster]   workers:  HEAD_ADDRESS=$NODE_IP:$RAY_PORT bash scripts/cluster/start_worker.sh
[cluster]   submit:   RAY_ADDRESS=$COPO_DASHBOARD_URL bash scripts/cluster/submit.sh
[cluster]   (workers and clients need the token file $(cluster_token_path): docs/CLUSTER.md, "Who may use the cluster")
[cluster]   stop:     bash scripts/cluster/stop.sh
EOF
