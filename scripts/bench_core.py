#!/usr/bin/env python
"""COPO's advantage and loss against verl's GRPO estimator and vanilla loss, side by side.

``python scripts/bench_core.py --help``. The code lives in ``recipe.bench.core``.
"""

from recipe.bench.core import main

if __name__ == "__main__":
    main()
