#!/usr/bin/env python
"""CPU studies: the SmolLM2 study (``run``, ``summarize``, ``census``, ``tasks``) and the controlled one
(``testbed ...``). Called by scripts/study_cpu.sh; ``python scripts/study_cpu.py --help``.

The code lives in ``recipe.study.smollm2`` (and ``recipe.study.testbed.cli`` for ``testbed``).
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["testbed"]:  # the controlled study (a study may not import another)
        from recipe.study.testbed.cli import main as testbed_main

        sys.exit(testbed_main(sys.argv[2:]))
    from recipe.study.smollm2 import main

    sys.exit(main())
