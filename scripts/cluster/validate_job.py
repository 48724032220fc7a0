#!/usr/bin/env python
"""Check a cluster job's config before it is submitted, composed exactly as the job will compose it
(run by scripts/cluster/submit.sh). ``python scripts/cluster/validate_job.py --help``.

The code lives in ``recipe.copo.validate_job``.
"""

import sys

from recipe.copo.validate_job import main  # the set-up installs the project (pip install -e)

if __name__ == "__main__":
    sys.exit(main())
