# shellcheck shell=bash
# Usage (sourced, never run): source recipe/copo/_run.sh; run_config CONFIG_NAME "$@"
# Sourced by recipe/copo/run_*.sh: each is `python -m recipe.copo.main_copo --config-name <run> "$@"`
# for one named config in recipe/copo/config/. This file only adds --help and DRY_RUN.
#
#   run_config CONFIG_NAME "$@"
#     -h/--help   print the calling script's header comment
#     DRY_RUN=1   print the command as one shell-quoted line and exit
#     PYTHON      interpreter with the project installed [python3]
# Settings are Hydra keys (pass overrides as arguments; they win over the config). Environment
# variables are read by the YAML for paths and cluster shape only: DATA_DIR, CKPT_DIR (required),
# MODEL_PATH, NNODES, GPUS_PER_NODE (recipe/copo/config/paper_base.yaml).

run_config() {
  local config=$1
  shift
  if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
  fi
  local -a cmd=("${PYTHON:-python3}" -m recipe.copo.main_copo --config-name "$config" "$@")
  if [ "${DRY_RUN:-0}" = "1" ]; then
    printf '%q ' "${cmd[@]}"
    echo
    exit 0
  fi
  exec "${cmd[@]}"
}

# Run directly instead of sourced: answer --help, refuse anything else.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "_run.sh is sourced by recipe/copo/run_*.sh, not run (see --help)" >&2; exit 2 ;;
  esac
fi
