#!/usr/bin/env python
"""HF rollout vs verl's vLLM rollout on CPU, one quickstart-sized run each.

``python scripts/bench_rollout.py --help``. The code lives in ``recipe.bench.rollout``.
"""

import sys

from recipe.bench.rollout import main

if __name__ == "__main__":
    sys.exit(main())
