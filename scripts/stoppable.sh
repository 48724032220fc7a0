# shellcheck shell=bash
# Sourced by the launchers (quickstart.sh, study_cpu.sh) so that a stop signal stops the job.
#
#   stoppable CMD ARGS...    # runs CMD in the background and waits for it
#
# bash runs a trap only after its foreground child ends, so a SIGTERM sent to the launcher alone
# (`timeout`, Slurm, `docker stop`, `kill PID`) would wait for the whole training run. Waiting on a
# background child instead, the trap runs at once: it sends SIGTERM to the running CMD (each Python
# driver stops its own trainer, Ray cluster and rollout server on SIGTERM), waits for it to finish
# stopping, and exits 143. Ctrl-C reaches bash too (a background child ignores SIGINT), same path.
_stoppable_child=""
# shellcheck disable=SC2329  # called by the trap below
_stoppable_stop() {
  if [ -n "$_stoppable_child" ]; then
    kill -TERM "$_stoppable_child" 2>/dev/null || true
    wait "$_stoppable_child" 2>/dev/null || true
  fi
  exit 143
}
trap _stoppable_stop TERM INT HUP
stoppable() {
  "$@" &
  _stoppable_child=$!
  local rc=0
  wait "$_stoppable_child" || rc=$?
  _stoppable_child=""
  return "$rc"
}
