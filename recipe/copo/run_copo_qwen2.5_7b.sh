#!/usr/bin/env bash
# COPO on Qwen2.5-7B-Instruct with the paper's settings (SPEC section 7):
# n=8, k=5, b=1, soft_with_zero, 512 prompts/step, PPO mini-batch 32, lr 1e-6, clip 0.2/0.2,
# prompt 1024 / response 2048, T=1.0, KL loss low_var_kl 0.001, entropy 0, seq-mean-token-mean,
# 70 steps on DAPO-Math-17k, validation on MATH-500 + GSM8K (n=8, T=1.0).
#
#   bash recipe/copo/run_copo_qwen2.5_7b.sh [hydra overrides...]      # extra args win (passed last)
#   DRY_RUN=1 bash recipe/copo/run_copo_qwen2.5_7b.sh ...             # print the command, run nothing
#
# This script is also the base of the other run scripts: they exec it with different env vars.
# Env vars (defaults in brackets):
#   MODEL_PATH [Qwen/Qwen2.5-7B-Instruct]  DATA_DIR [$HOME/data/copo]
#   TRAIN_FILES [$DATA_DIR/dapo_math_17k.parquet]
#   VAL_FILES   [[$DATA_DIR/math500.parquet,$DATA_DIR/gsm8k.parquet]]
#   CKPT_DIR [$HOME/ckpts/$PROJECT_NAME/$EXPERIMENT_NAME]  PROJECT_NAME [copo]  EXPERIMENT_NAME [...]
#   NNODES [1]  GPUS_PER_NODE [8]  LOGGER [["console","wandb"]]  PYTHON [python3]
#   ADV_ESTIMATOR [copo]  LOSS_MODE [copo]  BLEND_MODE [soft_with_zero]  COPO_K [5]  COPO_B [1]
#   ROLLOUT_N [8]  TRAIN_BATCH_SIZE [512]  PPO_MINI_BATCH_SIZE [32]  TOTAL_STEPS [70]
#   MICRO_BATCH_PER_GPU [4]  TP_SIZE [2]  GPU_MEM_UTIL [0.6]  ROLLOUT_NAME [vllm]
#   EXTRA_ARGS [""]: extra Hydra overrides (whitespace separated), placed before "$@".
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # print the header comment
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
set -xeuo pipefail

PYTHON=${PYTHON:-python3}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/copo}
TRAIN_FILES=${TRAIN_FILES:-$DATA_DIR/dapo_math_17k.parquet}
VAL_FILES=${VAL_FILES:-[$DATA_DIR/math500.parquet,$DATA_DIR/gsm8k.parquet]}

ADV_ESTIMATOR=${ADV_ESTIMATOR:-copo}
LOSS_MODE=${LOSS_MODE:-copo}
BLEND_MODE=${BLEND_MODE:-soft_with_zero}
COPO_K=${COPO_K:-5}
COPO_B=${COPO_B:-1}
ROLLOUT_N=${ROLLOUT_N:-8}

PROJECT_NAME=${PROJECT_NAME:-copo}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-${ADV_ESTIMATOR}_qwen2.5_7b_n${ROLLOUT_N}_k${COPO_K}_b${COPO_B}}
CKPT_DIR=${CKPT_DIR:-$HOME/ckpts/$PROJECT_NAME/$EXPERIMENT_NAME}
LOGGER=${LOGGER:-'["console","wandb"]'}

NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-512}
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-32}
TOTAL_STEPS=${TOTAL_STEPS:-70}
MAX_PROMPT_LEN=${MAX_PROMPT_LEN:-1024}
MAX_RESPONSE_LEN=${MAX_RESPONSE_LEN:-2048}
MICRO_BATCH_PER_GPU=${MICRO_BATCH_PER_GPU:-4}
TP_SIZE=${TP_SIZE:-2}
GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.6}
ROLLOUT_NAME=${ROLLOUT_NAME:-vllm}
EXTRA_ARGS=${EXTRA_ARGS:-}
DRY_RUN=${DRY_RUN:-0}

read -r -a EXTRA <<<"$EXTRA_ARGS"

CMD=(
  "$PYTHON" -m recipe.copo.main_copo
  algorithm.adv_estimator="$ADV_ESTIMATOR"
  algorithm.norm_adv_by_std_in_grpo=true
  algorithm.use_kl_in_reward=false
  algorithm.copo.k="$COPO_K"
  algorithm.copo.b="$COPO_B"
  algorithm.copo.blend_mode="$BLEND_MODE"
  algorithm.copo.entropy_source=answer
  algorithm.copo.entropy_penalty=false
  data.train_files="$TRAIN_FILES"
  data.val_files="$VAL_FILES"
  data.train_batch_size="$TRAIN_BATCH_SIZE"
  data.max_prompt_length="$MAX_PROMPT_LEN"
  data.max_response_length="$MAX_RESPONSE_LEN"
  data.filter_overlong_prompts=true
  data.truncation=error
  actor_rollout_ref.model.path="$MODEL_PATH"
  actor_rollout_ref.model.use_remove_padding=true
  actor_rollout_ref.model.enable_gradient_checkpointing=true
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.optim.lr_warmup_steps=0
  actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU"
  actor_rollout_ref.actor.policy_loss.loss_mode="$LOSS_MODE"
  actor_rollout_ref.actor.clip_ratio_low=0.2
  actor_rollout_ref.actor.clip_ratio_high=0.2
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
  actor_rollout_ref.actor.use_kl_loss=true
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.fsdp_config.param_offload=false
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=false
  actor_rollout_ref.rollout.name="$ROLLOUT_NAME"
  actor_rollout_ref.rollout.n="$ROLLOUT_N"
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.tensor_model_parallel_size="$TP_SIZE"
  actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEM_UTIL"
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU"
  actor_rollout_ref.rollout.val_kwargs.n=8
  actor_rollout_ref.rollout.val_kwargs.temperature=1.0
  actor_rollout_ref.rollout.val_kwargs.do_sample=true
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU"
  actor_rollout_ref.ref.fsdp_config.param_offload=true
  trainer.logger="$LOGGER"
  trainer.project_name="$PROJECT_NAME"
  trainer.experiment_name="$EXPERIMENT_NAME"
  trainer.default_local_dir="$CKPT_DIR"
  trainer.nnodes="$NNODES"
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.total_training_steps="$TOTAL_STEPS"
  trainer.val_before_train=true
  trainer.test_freq=10
  trainer.save_freq=10
  ${EXTRA[@]+"${EXTRA[@]}"}
  "$@"
)

if [ "$DRY_RUN" = "1" ]; then
  printf '%q ' "${CMD[@]}"
  echo
  exit 0
fi
exec "${CMD[@]}"
