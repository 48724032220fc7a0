#!/usr/bin/env python
"""Plot training runs, evaluation summaries or the CPU study: see ``python scripts/plot_run.py --help``.

The code lives in ``recipe.tracking.plots``.
"""

from recipe.tracking.plots import main

if __name__ == "__main__":
    main()
