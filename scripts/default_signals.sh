# shellcheck shell=bash
# Sourced first by the project's shell launchers, before any `cd`:
#
#   source "$(dirname "$0")/default_signals.sh"
#
# A job started in the background (`cmd &` in a script, `nohup cmd &`, several schedulers) inherits
# SIGINT and SIGQUIT as ignored, and bash can neither trap nor reset a signal that was ignored when it
# started: the launcher's `trap ... INT` would silently do nothing, and a group Ctrl-C or scancel
# SIGINT would stop nothing. So when SIGINT arrives ignored, the launcher is executed again,
# once, with both back to their defaults (coreutils `env --default-signal`); its traps then work as in
# a terminal. SIGHUP stays as it was (`nohup` ignores it on purpose). Without /proc or without an
# `env` that knows --default-signal (coreutils < 8.31) it carries on unchanged.
_copo_sigign=""
if [ -r "/proc/$$/status" ]; then
  _copo_sigign=$(awk '/^SigIgn:/ { print $2 }' "/proc/$$/status")
fi
# SIGINT is bit 1 (0x2). (bash ignores SIGQUIT itself, so its bit says nothing about how we were
# launched.) COPO_DEFAULT_SIGNALS_PID guards against a loop: exec keeps the PID.
if [ -n "$_copo_sigign" ] && (( (16#$_copo_sigign & 0x2) != 0 )) \
  && [ "${COPO_DEFAULT_SIGNALS_PID:-}" != "$$" ] && env --default-signal=INT true 2>/dev/null; then
  COPO_DEFAULT_SIGNALS_PID=$$ exec env --default-signal=INT,QUIT "$BASH" "${BASH_SOURCE[1]:-$0}" "$@"
fi
unset _copo_sigign
