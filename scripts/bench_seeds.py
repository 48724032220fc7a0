#!/usr/bin/env python
"""Runs per CPU-hour: the single-seed fast trainer against S seeds batched in one process, side by side.

``python scripts/bench_seeds.py --help``. The code lives in ``recipe.bench.seeds``.
"""

import sys

from recipe.bench.seeds import main

if __name__ == "__main__":
    sys.exit(main())
