#!/usr/bin/env python
"""Benchmark recipe/reward: agreement with labelled suites beside verl's scorers, throughput, hostile inputs.

``python scripts/bench_reward.py --help``. The code lives in ``recipe.bench.reward``.
"""

from recipe.bench.reward import main

if __name__ == "__main__":
    main()
