#!/usr/bin/env bash
# Create or refresh the CPU virtualenv (.venv), install the project with its [cpu]
# extra, then run the whole test suite. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not e2e"      # skip the real-trainer end-to-end tests
#   bash scripts/test.sh tests/copo_core   # one package
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

bash scripts/setup_env.sh
VENV=${COPO_VENV:-.venv}

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false

echo "[test] ruff"
"$VENV/bin/ruff" check .
echo "[test] pytest"
set +e
"$VENV/bin/python" -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: treated as a failure" >&2
  exit 1
fi
exit "$rc"
