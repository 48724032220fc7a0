#!/usr/bin/env python
"""The log-prob path before/after (issue 28), side by side in one run, on this machine.

    python scripts/bench_logprob.py                  # tiny copo_qwen2.5_3b actor (151,936 vocab), 3 rounds
    python scripts/bench_logprob.py --rounds 5 --sequences 16

Prints log-softmax-family op calls per token and per micro-batch, the log-prob pass and update
times, the measured matmul speed and the load average, for verl's plain path and the shipped fused
path. Logic: recipe/preflight/logprob_bench.py.
"""

import argparse
from pathlib import Path

from recipe.preflight.logprob_bench import bench, table  # the set-up installs the project
from recipe.preflight.shapes import model_shape

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-name", default="copo_qwen2.5_3b", help="(default %(default)s)")
    parser.add_argument(
        "--model",
        default="Qwen/Qwen2.5-3B-Instruct",
        help="shape (tiny layers, its vocabulary) (default %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="(default %(default)s)")
    parser.add_argument("--sequences", type=int, default=8, help="(default %(default)s)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed passes per run (median) (default %(default)s)"
    )
    parser.add_argument("--out", default="outputs/bench_logprob", help="(default %(default)s)")
    args = parser.parse_args()
    spec = {
        "config": args.config_name,
        "overrides": [],
        "shape": model_shape(args.model, tiny=True),
        "models_root": str(Path(args.out).resolve() / "models"),
        "device": "cpu",
        "sequences": args.sequences,
        "repeats": args.repeats,
        "tiny": True,
        "flash_attn": False,
    }
    print(table(bench(spec, args.rounds)))
