#!/usr/bin/env bash
# Create or refresh the CPU virtualenv (.venv), install the project with its [cpu]
# extra, then run the whole test suite. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not e2e"      # skip the real-trainer end-to-end tests
#   bash scripts/test.sh tests/copo_core   # one package
# The vllm_cpu tests (verl's vLLM rollout on CPU) run in a second venv, .venv-vllm, which this builds
# when missing or stale (scripts/setup_vllm_cpu.sh: ~7 GB, minutes) in the background while the other
# tests run; the vllm_cpu tests run last and wait for it. COPO_VLLM_CPU=0 skips both the build and
# the tests. COPO_VLLM_CPU_RECORD=FILE appends each vLLM run's wall time and peak memory to FILE.
set -euo pipefail
# A background launch inherits SIGINT ignored, which bash cannot trap: restart with the defaults.
# shellcheck source=scripts/default_signals.sh
source "$(dirname "$0")/default_signals.sh"
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

bash scripts/setup_env.sh
VENV=${COPO_VENV:-.venv}
VLLM_VENV=${COPO_VLLM_VENV:-.venv-vllm}
if [ "${COPO_VLLM_CPU:-1}" != 0 ] && ! bash scripts/setup_vllm_cpu.sh --current; then
  # The build is mostly download and unpacking: it runs beside the other tests, not before them (after
  # setup_env.sh: both write the project's egg-info). In a session of its own, so the EXIT trap is what
  # stops it, whole (INT and TERM exit through that trap). tests/vllm_cpu/conftest.py waits for the rc file.
  build_dir=$(mktemp -d "${TMPDIR:-/tmp}/copo-vllm-build.XXXXXX")
  export COPO_VLLM_BUILD_RC="$build_dir/rc" COPO_VLLM_BUILD_LOG="$build_dir/build.log"
  echo "[test] building $VLLM_VENV in the background (log: $COPO_VLLM_BUILD_LOG; COPO_VLLM_CPU=0 skips it and the vllm_cpu tests)"
  # shellcheck disable=SC2016  # expanded by the inner bash, from its environment
  setsid bash -c 'start=$(date +%s); bash scripts/setup_vllm_cpu.sh > "$COPO_VLLM_BUILD_LOG" 2>&1; rc=$?
    echo "[test] $0 build: rc $rc after $(( $(date +%s) - start )) s" >> "$COPO_VLLM_BUILD_LOG"
    echo "$rc" > "$COPO_VLLM_BUILD_RC.part" && mv "$COPO_VLLM_BUILD_RC.part" "$COPO_VLLM_BUILD_RC"' "$VLLM_VENV" &
  build_pid=$!
  trap 'kill -TERM -- "-$build_pid" 2>/dev/null || true' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
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
if [ -n "${build_pid:-}" ]; then
  wait "$build_pid" || true  # a selection without vllm_cpu tests still leaves a finished venv
  tail -n 1 "$COPO_VLLM_BUILD_LOG"
  if [ "$(cat "$COPO_VLLM_BUILD_RC" 2>/dev/null)" = 0 ]; then
    rm -rf "$build_dir"
  else
    echo "[test] the $VLLM_VENV build failed: its log is $COPO_VLLM_BUILD_LOG" >&2
  fi
fi
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: treated as a failure" >&2
  exit 1
fi
exit "$rc"
