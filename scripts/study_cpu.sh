#!/usr/bin/env bash
# CPU studies (docs/STUDY_CPU.md): GRPO, COPO soft_with_zero / soft / global_only and DAPO-style
# group filtering with verl's real trainer, same data, seeds and budget for every method.
#
#   bash scripts/study_cpu.sh testbed            # controlled study: a small policy trained here (below)
#   bash scripts/study_cpu.sh                    # real small LLM: SmolLM2-135M-Instruct; resumable
#   nohup bash scripts/study_cpu.sh testbed > runs/study_testbed.log 2>&1 &     # in the background
#   SEEDS=0,1,2 bash scripts/study_cpu.sh      # add a seed: the finished runs are skipped
#   DRY_RUN=1 bash scripts/study_cpu.sh [testbed]   # print the plan and commands, train nothing
#
# `testbed`: builds (once, cached under $COPO_CACHE/testbed/) a 1M-parameter Qwen2 fine-tuned on
# multi-digit addition, runs the step-0 census (docs/study_cpu/testbed/census.{csv,md}), trains
# every (seed, method) not finished yet, two at a time with one thread each, then writes
# docs/study_cpu/testbed/{steps,runs,summary,signal}.csv, summary.md and the plots. The workload is
# pinned in recipe/copo/config/testbed_cpu.yaml. Runs: runs/study_testbed/ (an interrupted run
# starts over). Environment: SEEDS (0-7), METHODS (all), STEPS (the pinned budget; set only for a
# pilot, with RUNS=runs/<elsewhere>), RUNS (runs/study_testbed), PARALLEL (2), DOCS
# (docs/study_cpu/testbed).
#
# SmolLM2 (no argument): finished runs are skipped; an interrupted run resumes from its last
# checkpoint. At the end it writes docs/study_cpu/{steps,summary}.csv and the plots
# (scripts/plot_run.py --study); before the runs, `study_cpu.py census` writes
# docs/study_cpu/census.{csv,md} (step-0 group outcomes). Environment: STEPS (12), TEST_FREQ (4:
# validate at steps 0, 4, 8, 12), SEEDS (0,1), METHODS (all), TRAIN_SIZE (512), VAL_SIZE (12),
# DATA_SEED (0), MODEL (SmolLM2-135M-Instruct, converted once), RUNS (runs/study_cpu), DOCS
# (docs/study_cpu), COPO_CACHE (~/.cache/copo-verl), COPO_VENV (.venv).
#
# SIGTERM or Ctrl-C stops the running step and every run it started (scripts/stoppable.sh).
set -euo pipefail
# A background launch inherits SIGINT ignored, which bash cannot trap: restart with the defaults.
# shellcheck source=scripts/default_signals.sh
source "$(dirname "$0")/default_signals.sh"

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi

cd "$(dirname "$0")/.."
VENV=${COPO_VENV:-.venv}
CACHE=${COPO_CACHE:-$HOME/.cache/copo-verl}
METHODS=${METHODS:-grpo,copo_soft_with_zero,copo_soft,copo_global_only,dapo_filter}
PY="$VENV/bin/python"
say() { echo "[study] $*"; }

# shellcheck source=scripts/venv_ready.sh
source scripts/venv_ready.sh
if ! venv_ready "$PY"; then
  say "setting up the CPU environment (scripts/setup_env.sh)"
  bash scripts/setup_env.sh
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
export COPO_CACHE=$CACHE

# SIGTERM, SIGINT or SIGHUP stops the running step and every process it started.
# shellcheck source=scripts/stoppable.sh
source scripts/stoppable.sh

if [ "${1:-}" = "testbed" ]; then
  TB=(scripts/study_cpu.py testbed)
  PLAN=(--seeds "${SEEDS:-0-7}" --methods "$METHODS" --runs "${RUNS:-runs/study_testbed}")
  if [ -n "${STEPS:-}" ]; then PLAN+=(--steps "$STEPS"); fi
  DOCS=${DOCS:-docs/study_cpu/testbed}
  if [ "${DRY_RUN:-0}" = 1 ]; then
    exec "$PY" "${TB[@]}" run "${PLAN[@]}" --dry-run
  fi
  status=0
  stoppable "$PY" "${TB[@]}" build
  stoppable "$PY" "${TB[@]}" census --docs "$DOCS" || status=$?
  stoppable "$PY" "${TB[@]}" run "${PLAN[@]}" --parallel "${PARALLEL:-2}" || status=$?
  stoppable "$PY" "${TB[@]}" summarize "${PLAN[@]}" --docs "$DOCS"
  exit "$status"
fi

STEPS=${STEPS:-12}
SEEDS=${SEEDS:-0,1}
TRAIN_SIZE=${TRAIN_SIZE:-512}
VAL_SIZE=${VAL_SIZE:-12}
DATA_SEED=${DATA_SEED:-0}

MODEL=${MODEL:-$("$PY" scripts/prepare_smollm2.py | tail -n 1)}
RUNS=${RUNS:-runs/study_cpu}
DOCS=${DOCS:-docs/study_cpu}
TASKS=$("$PY" scripts/study_cpu.py tasks)
DATA="$CACHE/data/study-mixed-n$TRAIN_SIZE-v$VAL_SIZE-s$DATA_SEED"
if [ ! -f "$DATA/train.parquet" ] || [ ! -f "$DATA/val.parquet" ]; then
  say "generating data in $DATA ($TASKS)"
  "$PY" -m data_prep reasoning_gym --tasks "$TASKS" --size "$TRAIN_SIZE" --val-size "$VAL_SIZE" \
    --seed "$DATA_SEED" --out "$DATA"
fi

ARGS=(--model "$MODEL" --data "$DATA" --steps "$STEPS" --seeds "$SEEDS" --methods "$METHODS"
  --test-freq "${TEST_FREQ:-4}" --runs "$RUNS")
if [ "${DRY_RUN:-0}" = 1 ]; then
  exec "$PY" scripts/study_cpu.py run "${ARGS[@]}" --dry-run
fi
status=0
# Step-0 group outcomes of the initial model on 32 training prompts per task (resumable, ~5 min).
stoppable "$PY" scripts/study_cpu.py census --model "$MODEL" --data "$DATA" --out "$RUNS/census" --docs "$DOCS" \
  || status=$?
stoppable "$PY" scripts/study_cpu.py run "${ARGS[@]}" || status=$?
stoppable "$PY" scripts/study_cpu.py summarize --seeds "$SEEDS" --methods "$METHODS" --runs "$RUNS" --docs "$DOCS"
stoppable "$PY" scripts/plot_run.py --study "$DOCS/steps.csv" --out "$DOCS"
exit "$status"
