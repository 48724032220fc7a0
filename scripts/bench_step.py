#!/usr/bin/env python
"""One CPU training step against the machine's limit and against plain PyTorch doing the same work.

``python scripts/bench_step.py --help``. The code lives in ``recipe.bench.step``.
"""

import sys

from recipe.bench.step import main

if __name__ == "__main__":
    sys.exit(main())
