#!/usr/bin/env bash
# DAPO baseline at 7B: GRPO with clip-higher 0.2/0.28, token-mean, group filtering on acc,
# the overlong penalty and no KL. The settings: recipe/copo/config/dapo_qwen2.5_7b.yaml.
#
#   bash recipe/copo/run_dapo_qwen2.5_7b.sh [hydra overrides...]      # overrides win over the config
#   DRY_RUN=1 bash recipe/copo/run_dapo_qwen2.5_7b.sh ...             # print the command, run nothing
#   bash recipe/copo/run_dapo_qwen2.5_7b.sh --help                # this text
#
# Env: DATA_DIR and CKPT_DIR (required; on storage every node sees), MODEL_PATH, NNODES [1],
# GPUS_PER_NODE [8], PYTHON [python3]. Several nodes: scripts/cluster/submit.sh --config dapo_qwen2.5_7b
# shellcheck source=recipe/copo/_run.sh
source "$(dirname "${BASH_SOURCE[0]}")/_run.sh"
run_config dapo_qwen2.5_7b "$@"
