#!/usr/bin/env python
"""The testbed v2 study (docs/STUDY_PLAN.md): ``python scripts/study_testbed2.py --help``.

Command line only; the study lives in ``recipe/study/testbed2`` (phases, jobs, collection, report)
and ``recipe/study/fast`` (the in-process trainer).
"""

from __future__ import annotations

import sys

from recipe.study.testbed2.cli import main

if __name__ == "__main__":
    sys.exit(main())
