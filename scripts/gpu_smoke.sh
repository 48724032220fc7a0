#!/usr/bin/env bash
# GPU smoke test: 2 COPO steps of a 0.5B model with vLLM rollout on ONE GPU, then an evaluation of
# the saved checkpoint. Prints step time and tokens/s. Run it first on a new GPU machine or image.
#
# Usage: bash scripts/gpu_smoke.sh [HYDRA_OVERRIDES...]
#        DRY_RUN=1 bash scripts/gpu_smoke.sh    # print the training and evaluation commands only
#
# It trains the paper's 7B config (recipe/copo/config/copo_qwen2.5_7b.yaml, via
# recipe/copo/run_copo_qwen2.5_7b.sh) with a small model, batch and length as overrides, so it
# exercises exactly the code path of the real runs: verl's trainer, FSDP2 actor + reference, vLLM
# rollout, COPO advantages and loss, checkpoint save; then scripts/evaluate.py on global_step_2.
#
# Environment (defaults in brackets):
#   MODEL_PATH   local HF model folder (nothing is downloaded) or a hub id (downloaded once into
#                HF_HOME)                                        [Qwen/Qwen2.5-0.5B-Instruct]
#   OUT_DIR      everything this script writes                   [outputs/gpu_smoke]
#   DATA_DIR     train.parquet / val.parquet; generated offline with
#                `python -m data_prep reasoning_gym` when missing [$OUT_DIR/data]
#   STEPS        training steps                                  [2]
#   ROLLOUT_N    responses per prompt                            [4]
#   BATCH        prompts per step                                [8]
#   MAX_TOKENS   max prompt and max response tokens              [512]
#   GPU_MEM_UTIL vLLM's share of GPU memory                      [0.4]
#   EVAL_K       samples per problem in the evaluation           [2]
#   ATTN         auto (the configs' default: flash_attention_2 on packed sequences when flash-attn
#                is installed, else sdpa) | flash_attention_2 | sdpa (on padded micro-batches) [auto]
#   PYTHON       interpreter with the project's [gpu] extra      [python3]
#   DRY_RUN      1 prints the commands and exits                 [0]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
  exit 0
fi

die() {
  echo "[gpu_smoke] ERROR: $*" >&2
  exit 1
}
log() { echo "[gpu_smoke] $*" >&2; }

PYTHON=${PYTHON:-python3}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-0.5B-Instruct}
OUT_DIR=${OUT_DIR:-outputs/gpu_smoke}
DATA_DIR=${DATA_DIR:-$OUT_DIR/data}
STEPS=${STEPS:-2}
ROLLOUT_N=${ROLLOUT_N:-4}
BATCH=${BATCH:-8}
MAX_TOKENS=${MAX_TOKENS:-512}
GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.4}
EVAL_K=${EVAL_K:-2}
ATTN=${ATTN:-auto}
DRY_RUN=${DRY_RUN:-0}
for v in STEPS ROLLOUT_N BATCH MAX_TOKENS EVAL_K; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v='${!v}' must be a positive integer"
done
[ "$ROLLOUT_N" -ge 2 ] || die "ROLLOUT_N=$ROLLOUT_N: COPO needs groups of at least 2 responses"
# Absolute paths: Ray workers do not necessarily share this shell's working directory.
OUT_DIR="$(realpath -m "$OUT_DIR")"
DATA_DIR="$(realpath -m "$DATA_DIR")"
CKPT_DIR="$OUT_DIR/ckpt"

# A local model folder means offline: make the HF libraries refuse any download.
if [ -d "$MODEL_PATH" ]; then
  [ -f "$MODEL_PATH/config.json" ] || die "MODEL_PATH='$MODEL_PATH' is a folder without config.json (not an HF model)"
  MODEL_PATH="$(realpath "$MODEL_PATH")"
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  log "local model $MODEL_PATH: HF_HUB_OFFLINE=1, nothing will be downloaded"
elif [[ "$MODEL_PATH" == /* || "$MODEL_PATH" == ./* ]]; then
  die "MODEL_PATH='$MODEL_PATH' does not exist"
else
  log "MODEL_PATH=$MODEL_PATH is a hub id: downloaded once into ${HF_HOME:-~/.cache/huggingface}"
fi

ATTN_ARGS=()
case "$ATTN" in
  auto) ;; # the configs' default: main_copo decides and prints it (recipe/copo/throughput.py)
  flash_attention_2) ATTN_ARGS=(actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2
    actor_rollout_ref.model.use_remove_padding=true) ;;
  sdpa) ATTN_ARGS=(actor_rollout_ref.model.override_config.attn_implementation=sdpa
    actor_rollout_ref.model.use_remove_padding=false) ;;
  *) die "ATTN='$ATTN' must be auto, flash_attention_2 or sdpa" ;;
esac

# The paper config with a 1-GPU shape and a tiny batch; paths given as keys, so no DATA_DIR/CKPT_DIR.
TRAIN_ARGS=(actor_rollout_ref.model.path="$MODEL_PATH"
  data.train_files="$DATA_DIR/train.parquet" data.val_files="$DATA_DIR/val.parquet"
  trainer.default_local_dir="$CKPT_DIR" trainer.project_name=copo_smoke trainer.experiment_name=gpu_smoke
  'trainer.logger=[console]' trainer.nnodes=1 trainer.n_gpus_per_node=1
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEM_UTIL"
  actor_rollout_ref.rollout.n="$ROLLOUT_N" data.train_batch_size="$BATCH"
  actor_rollout_ref.actor.ppo_mini_batch_size="$BATCH"
  data.max_prompt_length="$MAX_TOKENS" data.max_response_length="$MAX_TOKENS"
  trainer.total_training_steps="$STEPS" trainer.val_before_train=false trainer.test_freq=-1
  trainer.save_freq="$STEPS" data.truncation=left "${ATTN_ARGS[@]}" "$@")
EVAL_CMD=("$PYTHON" scripts/evaluate.py --model "$CKPT_DIR/global_step_$STEPS"
  --data "$DATA_DIR/val.parquet" --k "$EVAL_K" --max-tokens "$MAX_TOKENS" --out "$OUT_DIR/eval"
  --backend vllm)

if [ "$DRY_RUN" = "1" ]; then
  PYTHON="$PYTHON" DRY_RUN=1 bash recipe/copo/run_copo_qwen2.5_7b.sh "${TRAIN_ARGS[@]}"
  printf '%q ' "${EVAL_CMD[@]}"
  echo
  exit 0
fi

command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON='$PYTHON' not found; activate the env with the [gpu] extra"
"$PYTHON" scripts/cluster/check_env.py --gpu || die "fix the environment above (or use docker/Dockerfile)"
"$PYTHON" -c "import vllm" 2>/dev/null || die "vLLM is not installed: pip install -e \".[gpu]\""
mkdir -p "$OUT_DIR"

if [ ! -f "$DATA_DIR/train.parquet" ] || [ ! -f "$DATA_DIR/val.parquet" ]; then
  log "generating offline problems into $DATA_DIR (reasoning-gym)"
  "$PYTHON" -m data_prep reasoning_gym --out "$DATA_DIR" --size $((BATCH * STEPS * 4)) --val-size 32 --seed 0
fi

rm -f "$CKPT_DIR/metrics.jsonl"
log "training: $STEPS COPO step(s), $BATCH prompts x $ROLLOUT_N responses, model $MODEL_PATH, attention $ATTN"
t0=$SECONDS
PYTHON="$PYTHON" bash recipe/copo/run_copo_qwen2.5_7b.sh "${TRAIN_ARGS[@]}" 2>&1 | tee "$OUT_DIR/train.log"
train_s=$((SECONDS - t0))
[ -d "$CKPT_DIR/global_step_$STEPS" ] || die "no checkpoint at $CKPT_DIR/global_step_$STEPS; see $OUT_DIR/train.log"

log "evaluating $CKPT_DIR/global_step_$STEPS"
t0=$SECONDS
"${EVAL_CMD[@]}" 2>&1 | tee "$OUT_DIR/eval.log"
eval_s=$((SECONDS - t0))

# Per-step timing and throughput from the recipe's metrics.jsonl (verl's perf/* metrics).
"$PYTHON" - "$CKPT_DIR/metrics.jsonl" "$train_s" "$eval_s" <<'PY'
import json
import sys

path, train_s, eval_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(line) for line in open(path) if line.strip()]
rows = [r for r in rows if "perf/time_per_step" in r]
if not rows:
    sys.exit(f"[gpu_smoke] ERROR: no perf/time_per_step in {path}: did training log any step?")
print("[gpu_smoke] step  time_s  tokens  tokens/s  max_mem_GB")
for r in rows:
    t, tok = r["perf/time_per_step"], r.get("perf/total_num_tokens", float("nan"))
    mem = r.get("perf/max_memory_allocated_gb", float("nan"))
    print(f"[gpu_smoke] {r['step']:>4}  {t:6.1f}  {tok:6.0f}  {tok / t:8.1f}  {mem:10.1f}")
later = rows[1:] or rows  # the first step includes vLLM/CUDA-graph warm-up
avg_t = sum(r["perf/time_per_step"] for r in later) / len(later)
avg_tps = sum(r.get("perf/total_num_tokens", 0) / r["perf/time_per_step"] for r in later) / len(later)
print(f"[gpu_smoke] steady step time {avg_t:.1f} s, {avg_tps:.0f} tokens/s (1 GPU); "
      f"training process {train_s} s, evaluation {eval_s} s")
PY
log "OK: outputs in $OUT_DIR (train.log, eval.log, ckpt/, eval/)"
