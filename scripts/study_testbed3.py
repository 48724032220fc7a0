#!/usr/bin/env python
"""The testbed v3 study (docs/STUDY_PLAN.md, amendment): ``python scripts/study_testbed3.py --help``.

Command line only; the study lives in ``recipe/study/testbed3`` (phases, jobs, collection, report)
and ``recipe/study/fast`` (the in-process trainer).
"""

from __future__ import annotations

import sys

from recipe.study.testbed3.cli import main

if __name__ == "__main__":
    sys.exit(main())
