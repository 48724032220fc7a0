#!/usr/bin/env bash
# Create or refresh the CPU virtualenv (.venv), install the project with its [cpu]
# extra, then run the whole test suite. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not e2e"      # skip the real-trainer end-to-end tests
#   bash scripts/test.sh tests/copo_core   # one package
# The vllm_cpu tests (verl's vLLM rollout on CPU) run in a second venv, .venv-vllm, which this builds
# when missing (scripts/setup_vllm_cpu.sh: ~7 GB, minutes); COPO_VLLM_CPU=0 skips both the build and
# the tests. COPO_VLLM_CPU_RECORD=FILE appends each vLLM run's wall time and peak memory to FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

bash scripts/setup_env.sh
VENV=${COPO_VENV:-.venv}
VLLM_VENV=${COPO_VLLM_VENV:-.venv-vllm}
if [ "${COPO_VLLM_CPU:-1}" != 0 ] && [ ! -x "$VLLM_VENV/bin/python" ]; then
  echo "[test] building $VLLM_VENV for the vllm_cpu tests (COPO_VLLM_CPU=0 skips them)"
  start=$(date +%s)
  bash scripts/setup_vllm_cpu.sh
  echo "[test] $VLLM_VENV built in $(( $(date +%s) - start )) s"
fi

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
