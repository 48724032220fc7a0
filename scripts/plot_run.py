#!/usr/bin/env python
"""Plot training runs, evaluation summaries or the CPU study: see ``python scripts/plot_run.py --help``.

The code lives in ``recipe.tracking.plots`` (runs, evaluations) and ``recipe.study.plots`` (``--study``).
"""

from recipe.study.plots import plot_study
from recipe.tracking.plots import main

if __name__ == "__main__":
    main(study_plotter=plot_study)
