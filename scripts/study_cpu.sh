#!/usr/bin/env bash
# CPU study (docs/STUDY_CPU.md): GRPO, COPO soft_with_zero / soft / global_only and DAPO-style
# group filtering on SmolLM2-135M-Instruct with verl's real trainer, same data, seeds and budget.
#
#   bash scripts/study_cpu.sh                    # runs in the foreground; resumable
#   nohup bash scripts/study_cpu.sh > runs/study_cpu.log 2>&1 &     # in the background
#   SEEDS=0,1,2 bash scripts/study_cpu.sh      # add a seed: the finished runs are skipped
#   DRY_RUN=1 bash scripts/study_cpu.sh          # print the plan and commands, train nothing
#
# Finished runs are skipped; an interrupted run resumes from its last checkpoint. At the end it
# writes docs/study_cpu/{steps,summary}.csv and the plots (scripts/plot_run.py --study); before the
# runs, `study_cpu.py census` writes docs/study_cpu/census.{csv,md} (step-0 group outcomes).
# Environment: STEPS (12), TEST_FREQ (4: validate at steps 0, 4, 8, 12), SEEDS (0,1),
# METHODS (all), TRAIN_SIZE (512), VAL_SIZE (12), DATA_SEED (0), COPO_CACHE (~/.cache/copo-verl),
# COPO_VENV (.venv).
set -euo pipefail

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi

cd "$(dirname "$0")/.."
VENV=${COPO_VENV:-.venv}
CACHE=${COPO_CACHE:-$HOME/.cache/copo-verl}
STEPS=${STEPS:-12}
SEEDS=${SEEDS:-0,1}
METHODS=${METHODS:-grpo,copo_soft_with_zero,copo_soft,copo_global_only,dapo_filter}
TRAIN_SIZE=${TRAIN_SIZE:-512}
VAL_SIZE=${VAL_SIZE:-12}
DATA_SEED=${DATA_SEED:-0}
PY="$VENV/bin/python"
say() { echo "[study] $*"; }

if ! "$PY" -c "import verl, ray, reasoning_gym, gguf, recipe.cpu_backend" >/dev/null 2>&1; then
  say "setting up the CPU environment (scripts/setup_env.sh)"
  bash scripts/setup_env.sh
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
export COPO_CACHE=$CACHE

MODEL=$("$PY" scripts/prepare_smollm2.py | tail -n 1)
TASKS=$("$PY" -c "import sys; sys.path.insert(0, 'scripts'); import study_cpu; print(study_cpu.TASKS)")
DATA="$CACHE/data/study-mixed-n$TRAIN_SIZE-v$VAL_SIZE-s$DATA_SEED"
if [ ! -f "$DATA/train.parquet" ] || [ ! -f "$DATA/val.parquet" ]; then
  say "generating data in $DATA ($TASKS)"
  "$PY" -m data_prep reasoning_gym --tasks "$TASKS" --size "$TRAIN_SIZE" --val-size "$VAL_SIZE" \
    --seed "$DATA_SEED" --out "$DATA"
fi

ARGS=(--model "$MODEL" --data "$DATA" --steps "$STEPS" --seeds "$SEEDS" --methods "$METHODS"
  --test-freq "${TEST_FREQ:-4}")
if [ "${DRY_RUN:-0}" = 1 ]; then
  exec "$PY" scripts/study_cpu.py run "${ARGS[@]}" --dry-run
fi
status=0
# Step-0 group outcomes of the initial model on 32 training prompts per task (resumable, ~5 min).
"$PY" scripts/study_cpu.py census --model "$MODEL" --data "$DATA" || status=$?
"$PY" scripts/study_cpu.py run "${ARGS[@]}" || status=$?
"$PY" scripts/study_cpu.py summarize --seeds "$SEEDS" --methods "$METHODS"
"$PY" scripts/plot_run.py --study docs/study_cpu/steps.csv --out docs/study_cpu
exit "$status"
