#!/usr/bin/env python
"""Train with verl's real trainer on CPU and follow it step by step (called by scripts/quickstart.sh).

    python scripts/quickstart_run.py --model DIR --data DIR --out DIR [--steps N] [--algo copo|grpo] \
        [hydra.override=value ...]

The code lives in ``recipe.quickstart.run`` (``python scripts/quickstart_run.py --help``).
"""

import sys

from recipe.quickstart.run import main

if __name__ == "__main__":
    sys.exit(main())
