#!/usr/bin/env bash
# Run a command while N other processes keep the cores busy, as on a slow day of a shared machine:
#
#   bash scripts/busy_machine.sh 4 bash scripts/quickstart.sh      # 4 spinning neighbours
#
# CPU wall times on a shared machine drift with how busy the cores are; this project prints the
# fp32 matmul roofline beside every time (recipe/cpu_backend/roofline.py). The slow days of
# the measurements in docs/CPU.md were other jobs on the same 2 cores (load 6-16, roofline 50-95 GFLOP/s).
# This recreates such a day on a quiet one: N busy-looping shell processes at the command's own
# priority compete with it for the cores. On the 2-core machine of docs/CPU.md (2026-11-25, ~205 GFLOP/s
# quiet), 2-3 neighbours brought the roofline to 31-52 GFLOP/s and plain PyTorch's training update
# to 4.5x its quiet time, while the quickstart took 1.45-1.65x its own (docs/CPU.md: the roofline
# overstates contention). The job prints what it got.
#
# The neighbours stop when the command ends, fails, or is stopped (SIGTERM / Ctrl-C reach the
# command through scripts/stoppable.sh first). Exit status: the command's.
set -euo pipefail
# A background launch inherits SIGINT ignored, which bash cannot trap: restart with the defaults.
# shellcheck source=scripts/default_signals.sh
source "$(dirname "$0")/default_signals.sh"

usage() { echo "usage: bash scripts/busy_machine.sh N COMMAND [ARGS...]   (N: busy neighbour processes, 0-64)"; }
if [ $# -ge 1 ] && { [ "$1" = -h ] || [ "$1" = --help ]; }; then
  usage
  exit 0
fi
if [ $# -lt 2 ]; then
  usage >&2
  exit 2
fi
N=$1
shift
if ! [[ $N =~ ^[0-9]+$ ]] || [ "$N" -gt 64 ]; then
  echo "busy_machine: N must be a whole number of neighbour processes from 0 to 64, got '$N'" >&2
  exit 2
fi

NEIGHBOURS=()
# shellcheck disable=SC2329  # called by the trap
stop_neighbours() {
  if [ ${#NEIGHBOURS[@]} -gt 0 ]; then
    kill "${NEIGHBOURS[@]}" 2>/dev/null || true
    wait "${NEIGHBOURS[@]}" 2>/dev/null || true
  fi
}
trap stop_neighbours EXIT
for _ in $(seq 1 "$N"); do
  (trap - TERM INT HUP EXIT; while :; do :; done) &
  NEIGHBOURS+=("$!")
done
echo "busy_machine: $N busy neighbour processes (pids ${NEIGHBOURS[*]:-none}) while: $*" >&2

# shellcheck source=scripts/stoppable.sh
source "$(dirname "$0")/stoppable.sh"
stoppable "$@"
