#!/usr/bin/env bash
# Stop the Ray processes that start_head.sh / start_worker.sh started on this machine, and only those.
#
# Usage: bash scripts/cluster/stop.sh [--dry-run]
#
# Unlike `ray stop`, which ends every Ray process of the user on the machine (other people's jobs
# included), this reads the state files the start scripts wrote (COPO_RAY_STATE_DIR, default
# ~/.cache/copo-verl/ray/<hostname>.{head,worker}.state) and signals the processes of those sessions:
# the recorded PIDs still running that session, every process whose command line names its Ray temp
# dir, and their descendants (Ray workers). SIGTERM first, SIGKILL after STOP_TIMEOUT_S.
# It talks to no Ray API (it signals the processes recorded on this node), so it needs no token and
# stops the node even when the token file is gone or wrong.
#
# Environment:
#   COPO_RAY_STATE_DIR  where the start scripts recorded their sessions [~/.cache/copo-verl/ray]
#   STOP_TIMEOUT_S      seconds between SIGTERM and SIGKILL            [20]
#   DRY_RUN             1 lists the PIDs it would stop and exits       [0]
set -euo pipefail
# shellcheck source=scripts/cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage_from_header "$0"; exit 0 ;;
    --dry-run) DRY_RUN=1; shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
DRY_RUN=${DRY_RUN:-0}
STOP_TIMEOUT_S=${STOP_TIMEOUT_S:-20}
require_int STOP_TIMEOUT_S "$STOP_TIMEOUT_S"

host="$(hostname)"
shopt -s nullglob
states=("$COPO_RAY_STATE_DIR/$host".*.state)
if [ "${#states[@]}" -eq 0 ]; then
  log "nothing to stop: no state file for $host in $COPO_RAY_STATE_DIR"
  exit 0
fi

# alive PID...: those still running (zombies count as stopped).
alive() {
  local pid
  for pid in "$@"; do
    if process_alive "$pid"; then echo "$pid"; fi
  done
}

for state in "${states[@]}"; do
  # Read the state file as data (not `source`): only the keys we wrote.
  RAY_TEMP_DIR="$(sed -n 's/^RAY_TEMP_DIR=//p' "$state")"
  client_port="$(sed -n 's/^RAY_CLIENT_PORT=//p' "$state")"
  recorded="$(sed -n 's/^PIDS="\(.*\)"$/\1/p' "$state")"
  [ -n "$RAY_TEMP_DIR" ] || die "state file $state names no RAY_TEMP_DIR; remove it by hand if stale"

  # A recorded PID still counts only if it still names our temp dir (PIDs get reused).
  targets=()
  for pid in $recorded; do
    cmd="$(cmdline_of "$pid")"
    if [ -n "$cmd" ] && is_our_ray_cmd "$cmd" "$RAY_TEMP_DIR" "$client_port"; then targets+=("$pid"); fi
  done
  mapfile -t current < <(ray_pids_for_session "$RAY_TEMP_DIR" "$client_port")
  mapfile -t all < <(descendants "${targets[@]}" "${current[@]}" | sort -un)

  if [ "$DRY_RUN" = "1" ]; then
    echo "$state: ${all[*]:-}"
    continue
  fi
  if [ "${#all[@]}" -gt 0 ]; then
    log "stopping ${#all[@]} process(es) of $(basename "$state" .state): ${all[*]}"
    kill -TERM "${all[@]}" 2>/dev/null || true
    deadline=$((SECONDS + STOP_TIMEOUT_S))
    while [ "$SECONDS" -lt "$deadline" ]; do
      mapfile -t left < <(alive "${all[@]}")
      [ "${#left[@]}" -gt 0 ] || break
      sleep 1
    done
    mapfile -t left < <(alive "${all[@]}")
    if [ "${#left[@]}" -gt 0 ]; then
      log "SIGKILL to ${#left[@]} process(es) still alive after ${STOP_TIMEOUT_S}s: ${left[*]}"
      kill -KILL "${left[@]}" 2>/dev/null || true
    fi
  else
    log "no live process left for $(basename "$state" .state)"
  fi
  rm -f "$state"
done
log "done"
