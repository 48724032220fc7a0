#!/usr/bin/env python
"""Evaluate models or a run's checkpoints: mean@k / maj@k / pass@k per checkpoint x dataset.

Examples::

    # every global_step_* of a verl run (FSDP shards merged once under OUT/merged/)
    python scripts/evaluate.py --model checkpoints/copo/qwen7b_copo \\
        --data data/math500.parquet data/gsm8k.parquet data/aime24.parquet --out eval/qwen7b_copo

    # a HF folder, k overridden per dataset, vLLM on all visible GPUs when installed
    python scripts/evaluate.py --model Qwen/Qwen2.5-7B-Instruct --data data/aime24.parquet \\
        --k-per-dataset aime24=64 --max-tokens 2048 --out eval/base

Outputs in ``--out``: samples.jsonl (every sample), summary.csv and summary.md (one row per
checkpoint x dataset). Rerunning with the same ``--out`` skips finished pairs; a crash loses at
most the pair in flight. A checkpoint that cannot be merged or loaded (truncated, corrupted) is named
and skipped, the others are evaluated, and the exit code is 1. SIGTERM / SIGINT / SIGHUP (``timeout``,
Slurm, ``docker stop``, Ctrl-C) stop every process the evaluation started (vLLM workers, the checkpoint
merger) and exit with 128 + the signal; finished pairs stay on disk for the rerun.
"""

from __future__ import annotations

import argparse
import os
import sys

from recipe.evaluation import children
from recipe.evaluation.backends import BACKENDS, SamplingConfig
from recipe.evaluation.datasets import parse_k_overrides
from recipe.evaluation.runner import EvalConfig, EvalStats, run_evaluation
from recipe.evaluation.scoring import DEFAULT_REWARD
from recipe.proc import Stopped, restore_default_signals, stop_signals_forwarded


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evaluate.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model",
        nargs="+",
        required=True,
        help="HF model folders or hub ids, verl global_step_N folders, or verl run folders (all steps)",
    )
    parser.add_argument("--data", nargs="+", required=True, help="eval parquets written by data_prep")
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="samples per problem for every dataset not named in --k-per-dataset "
        "(default: SPEC section 7, MATH-500/GSM8K 8, AIME 64, others 8)",
    )
    parser.add_argument(
        "--k-per-dataset",
        nargs="*",
        default=[],
        metavar="NAME=K",
        help="per-data_source k; NAME is the data_source or its last path part, e.g. aime24=64 MATH-500=16",
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="0 means greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=2048, help="max generated tokens per response")
    parser.add_argument(
        "--batch-size", type=int, default=16, help="sequences per generate() call (hf backend)"
    )
    parser.add_argument("--out", default="eval_results", help="output folder (resumable)")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="auto: vllm if installed and a GPU, else hf; vllm without a GPU: one CPU worker (vLLM's CPU build, "
        ".venv-vllm)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype",
        default="auto",
        help="weights dtype of the hf backend and of vLLM on CPU: auto (float32 on CPU), float32, bfloat16",
    )
    parser.add_argument("--reward", default=DEFAULT_REWARD, help="batch reward function as module:function")
    parser.add_argument("--overwrite", action="store_true", help="redo pairs already complete in --out")
    parser.add_argument(
        "--vllm-engine",
        default=None,
        metavar="MODULE:CLASS",
        help="engine each vLLM worker loads in place of vllm.LLM (default: vLLM); a stand-in lets the "
        "data-parallel plumbing run without a GPU",
    )
    return parser


def main(argv: list[str] | None = None) -> EvalStats:
    restore_default_signals()  # a background launch inherits SIGINT ignored (recipe.proc)
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        cfg = EvalConfig(
            models=args.model,
            data=args.data,
            out=args.out,
            k=args.k,
            k_overrides=parse_k_overrides(args.k_per_dataset),
            sampling=SamplingConfig(
                temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed
            ),
            batch_size=args.batch_size,
            backend=args.backend,
            dtype=args.dtype,
            reward=args.reward,
            overwrite=args.overwrite,
            vllm_engine=args.vllm_engine,
        )
        # A stop signal stops every child group (children.CHILDREN) and raises Stopped here.
        with stop_signals_forwarded(children.CHILDREN):
            stats = run_evaluation(cfg)
        if stats.failed:
            raise SystemExit(
                f"evaluate.py: error: {len(stats.failed)} checkpoint(s) could not be loaded and were not evaluated: "
                f"{', '.join(stats.failed)} (see [eval] NOT EVALUATED above); the others are in {args.out}"
            )
        return stats
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"evaluate.py: error: {err}") from err
    except Stopped as stop:
        print(f"evaluate.py: {stop}; finished pairs are kept in {args.out}", file=sys.stderr)
        raise SystemExit(stop.exit_code) from None


if __name__ == "__main__":
    main()
