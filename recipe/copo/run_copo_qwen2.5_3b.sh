#!/usr/bin/env bash
# COPO on Qwen2.5-3B-Instruct with the paper's settings (SPEC section 7): n=6, k=20, b=1.5,
# soft_with_zero. The settings: recipe/copo/config/copo_qwen2.5_3b.yaml.
#
#   bash recipe/copo/run_copo_qwen2.5_3b.sh [hydra overrides...]      # overrides win over the config
#   DRY_RUN=1 bash recipe/copo/run_copo_qwen2.5_3b.sh ...             # print the command, run nothing
#   bash recipe/copo/run_copo_qwen2.5_3b.sh --help                # this text
#
# Env: DATA_DIR and CKPT_DIR (required; on storage every node sees), MODEL_PATH, NNODES [1],
# GPUS_PER_NODE [8], PYTHON [python3]. Several nodes: scripts/cluster/submit.sh --config copo_qwen2.5_3b
# shellcheck source=recipe/copo/_run.sh
source "$(dirname "${BASH_SOURCE[0]}")/_run.sh"
run_config copo_qwen2.5_3b "$@"
