#!/usr/bin/env python
"""CPU studies: the SmolLM2 study (``run``, ``summarize``, ``census``, ``tasks``) and the controlled one
(``testbed ...``). Called by scripts/study_cpu.sh; ``python scripts/study_cpu.py --help``.

The code lives in ``recipe.study.smollm2`` (and ``recipe.study.testbed.cli`` for ``testbed``).
"""

import sys

from recipe.study.smollm2 import main

if __name__ == "__main__":
    sys.exit(main())
