"""copo_core stays pure torch: importing it loads no verl, ray or transformers."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import REPO


def test_no_framework_imports() -> None:
    code = (
        "import sys, copo_core\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'verl', 'ray', 'transformers', 'pandas'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == ""
