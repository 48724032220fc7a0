#!/usr/bin/env python
"""Check a cluster job's config before it is submitted, composed exactly as the job will compose it
(run by scripts/cluster/submit.sh). ``python scripts/cluster/validate_job.py --help``.

The code lives in ``recipe.copo.validate_job``.
"""

import sys
from pathlib import Path

# This checkout's `recipe`, also for a python the project is not installed in (submit.sh --dry-run).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from recipe.copo.validate_job import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
