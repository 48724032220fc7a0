# shellcheck shell=bash
# Sourced by the launchers (quickstart.sh, study_cpu.sh) so that a stop signal stops the job.
#
#   stoppable CMD ARGS...    # runs CMD in the background and waits for it
#
# bash runs a trap only after its foreground child ends, so a SIGTERM sent to the launcher alone
# (`timeout`, Slurm, `docker stop`, `kill PID`) would wait for the whole training run. Waiting on a
# background child instead, the trap runs at once: it sends SIGTERM to the running CMD (each Python
# driver stops its own trainer, Ray cluster and rollout server on SIGTERM), waits for it to finish
# stopping, and exits 128 + the signal (143 for SIGTERM, 130 for Ctrl-C). Ctrl-C reaches bash too (a
# background child ignores SIGINT), same path. Further signals are ignored while stopping, so a second
# Ctrl-C or scancel cannot cut the wait short and leave the child's work running.
_stoppable_child=""
# shellcheck disable=SC2329  # called by the traps below
_stoppable_stop() {
  trap '' TERM INT HUP
  if [ -n "$_stoppable_child" ]; then
    kill -TERM "$_stoppable_child" 2>/dev/null || true
    wait "$_stoppable_child" 2>/dev/null || true
  fi
  exit $((128 + $1))
}
trap '_stoppable_stop 15' TERM
trap '_stoppable_stop 2' INT
trap '_stoppable_stop 1' HUP
stoppable() {
  "$@" &
  _stoppable_child=$!
  local rc=0
  wait "$_stoppable_child" || rc=$?
  _stoppable_child=""
  return "$rc"
}
