#!/usr/bin/env bash
# GRPO baseline for the 7B COPO run: same settings, verl's grpo estimator and vanilla loss.
# The settings: recipe/copo/config/grpo_qwen2.5_7b.yaml.
#
#   bash recipe/copo/run_grpo_qwen2.5_7b.sh [hydra overrides...]      # overrides win over the config
#   DRY_RUN=1 bash recipe/copo/run_grpo_qwen2.5_7b.sh ...             # print the command, run nothing
#   bash recipe/copo/run_grpo_qwen2.5_7b.sh --help                # this text
#
# Env: DATA_DIR and CKPT_DIR (required; on storage every node sees), MODEL_PATH, NNODES [1],
# GPUS_PER_NODE [8], PYTHON [python3]. Several nodes: scripts/cluster/submit.sh --config grpo_qwen2.5_7b
# shellcheck source=recipe/copo/_run.sh
source "$(dirname "${BASH_SOURCE[0]}")/_run.sh"
run_config grpo_qwen2.5_7b "$@"
