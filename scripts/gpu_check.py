#!/usr/bin/env python
"""GPU preflight: run this first on a new GPU machine. Nothing is downloaded.

    python scripts/gpu_check.py --config-name copo_qwen2.5_3b            # the paper's 3B run
    python scripts/gpu_check.py --config-name copo_qwen2.5_7b --skip-trainer
    python scripts/gpu_check.py --config-name copo_qwen2.5_3b --tiny     # CPU / CI: two narrow layers
    python scripts/gpu_check.py --help                                    # every option (argparse)

It builds random weights of the named run's model shape, builds the run's actor exactly as verl's
actor worker builds it, and prints one table: the environment, COPO-vs-vanilla parity against the
measured noise floor, update time, tokens/s, MFU (with the FLOP formula), the log-prob pass, peak
memory, the log-softmax op calls per token, and two full trainer steps on this one device (vLLM
when it imports, else the hf rollout) with a checkpoint. docs/GPU.md explains each row. Logic:
recipe/preflight/.
"""

import sys

from recipe.preflight.cli import main  # the set-up installs the project (pip install -e)

if __name__ == "__main__":
    sys.exit(main())
