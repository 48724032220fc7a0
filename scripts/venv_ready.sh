# shellcheck shell=bash
# venv_ready PY [MODULE...]: does the virtualenv behind PY have what the CPU scripts run (and MODULE...,
# e.g. vllm for the quickstart's --rollout vllm)? Sourced by
# quickstart.sh and study_cpu.sh, which run scripts/setup_env.sh when it does not.
#
# It looks the packages up (find_spec, ~0.04 s) instead of importing them: importing verl, ray and
# torch took ~4.5 s of a quiet ~4-minute quickstart, and the trainer imports them again anyway. A
# package that is present but broken fails the run with its traceback in train.log; `--setup`
# (quickstart.sh) reinstalls.
venv_ready() {
  "$1" -c "
import importlib.util, sys
needed = ('torch', 'transformers', 'verl', 'ray', 'reasoning_gym', 'gguf', 'recipe.cpu_backend', *sys.argv[1:])
sys.exit(any(importlib.util.find_spec(name) is None for name in needed))
" "${@:2}" >/dev/null 2>&1
}
