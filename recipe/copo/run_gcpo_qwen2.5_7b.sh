#!/usr/bin/env bash
# GCPO on Qwen2.5-7B-Instruct: the COPO 7B settings with GCPO's cooperative advantage (SPEC
# section 8) and the vanilla loss; GCPO keys as overrides, e.g. algorithm.gcpo.beta=0.5.
# The settings: recipe/copo/config/gcpo_qwen2.5_7b.yaml.
#
#   bash recipe/copo/run_gcpo_qwen2.5_7b.sh [hydra overrides...]      # overrides win over the config
#   DRY_RUN=1 bash recipe/copo/run_gcpo_qwen2.5_7b.sh ...             # print the command, run nothing
#   bash recipe/copo/run_gcpo_qwen2.5_7b.sh --help                # this text
#
# Env: DATA_DIR and CKPT_DIR (required; on storage every node sees), MODEL_PATH, NNODES [1],
# GPUS_PER_NODE [8], PYTHON [python3]. Several nodes: scripts/cluster/submit.sh --config gcpo_qwen2.5_7b
# shellcheck source=recipe/copo/_run.sh
source "$(dirname "${BASH_SOURCE[0]}")/_run.sh"
run_config gcpo_qwen2.5_7b "$@"
