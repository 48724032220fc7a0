#!/usr/bin/env bash
# Run the signal, stop, fault and timing-sensitive tests 5 times from a background job and 5 times beside
# busy neighbours, and report every test that failed even once (exit 1 if any did):
#
#   bash scripts/flake_check.sh                          # default: --rounds 5 --neighbours 2, runs/flake_check/
#   bash scripts/flake_check.sh --rounds 2 -- tests/recipe/test_proc.py
#
# The logic is tests/flake_check.py (its --help lists the options); results: runs/flake_check/summary.txt.
set -euo pipefail
# A background launch inherits SIGINT ignored, which bash cannot trap: restart with the defaults.
# shellcheck source=scripts/default_signals.sh
source "$(dirname "$0")/default_signals.sh"
cd "$(dirname "$0")/.."
VENV=${COPO_VENV:-.venv}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "flake_check.sh: no $VENV/bin/python: run 'bash scripts/setup_env.sh' first (or set COPO_VENV to a venv)" >&2
  exit 2
fi
exec "$VENV/bin/python" -m tests.flake_check "$@"
