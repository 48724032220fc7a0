#!/usr/bin/env python
"""The regime map, testbed v4 (docs/STUDY_PLAN.md, "Amendment: regime map (issue 37)"):
``python scripts/study_testbed4.py --help``.

Command line only; the study lives in ``recipe/study/testbed4`` (knob, data, census, cost, plan, report).
"""

from __future__ import annotations

import sys

from recipe.study.testbed4.cli import main

if __name__ == "__main__":
    sys.exit(main())
