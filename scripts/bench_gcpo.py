#!/usr/bin/env python
"""GCPO's advantage (Shapley shares) and its embedder: time per step at paper sizes.

``python scripts/bench_gcpo.py --help``. The code lives in ``recipe.bench.gcpo``.
"""

from recipe.bench.gcpo import main

if __name__ == "__main__":
    main()
