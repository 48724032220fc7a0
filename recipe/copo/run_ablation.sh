#!/usr/bin/env bash
# COPO blend-mode ablations (SPEC section 4) on the paper's 7B or 3B COPO run: the run's config
# plus one option of the `ablation` config group (recipe/copo/config/ablation/<ABLATION>.yaml).
#
#   bash recipe/copo/run_ablation.sh ABLATION [SIZE] [hydra overrides...]
#   bash recipe/copo/run_ablation.sh global_only
#   bash recipe/copo/run_ablation.sh soft 3b trainer.total_training_steps=40
#   DRY_RUN=1 bash recipe/copo/run_ablation.sh zero        # print the command, run nothing
#
# ABLATION: global_only | soft | soft_with_forced | zero | forced | soft_with_zero | local_only
#   (soft_with_zero is the main COPO run; local_only is COPO's GRPO-equivalent mode).
# SIZE [7b]: 7b or 3b (copo_qwen2.5_<SIZE>.yaml). The same without this script:
#   python -m recipe.copo.main_copo --config-name copo_qwen2.5_7b +ablation=global_only
# Env: as the other run scripts (DATA_DIR, CKPT_DIR required; MODEL_PATH, NNODES, GPUS_PER_NODE).
# The experiment name (and so the checkpoint folder) carries the mode: runs never share one.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=recipe/copo/_run.sh
source "$HERE/_run.sh"
case "${1:-}" in -h | --help) run_config help "$@" ;; esac

ABLATION=${1:-}
modes=""
for f in "$HERE"/config/ablation/*.yaml; do modes+="$(basename "$f" .yaml) "; done
if [ -z "$ABLATION" ] || [ ! -f "$HERE/config/ablation/$ABLATION.yaml" ]; then
  echo "run_ablation.sh: ABLATION must be one of: ${modes% } (got '$ABLATION'); see --help" >&2
  exit 2
fi
shift
SIZE=7b
case "${1:-}" in 7b | 3b) SIZE=$1; shift ;; esac
run_config "copo_qwen2.5_$SIZE" "+ablation=$ABLATION" "$@"
