"""Run a command and record its CPU seconds: ``python -m recipe.study.common.usage OUT_JSON -- CMD ...``.

The CPU time of a verl run is spread over Ray's processes; ``getrusage(RUSAGE_CHILDREN)`` after the
command exits counts every descendant that was waited for (the launcher's Ray cluster is stopped and
reaped on a normal exit), which is the run's CPU time up to processes Ray leaves behind. Written as
``{"cpu_s": ..., "wall_s": ..., "returncode": ...}``; the exit status is the command's. Signals reach
the command through the process group the study driver starts this in.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out, command = Path(args[0]), args[2:]
    started = time.monotonic()
    returncode = subprocess.call(command)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                "wall_s": round(time.monotonic() - started, 2),
                "returncode": returncode,
            },
            indent=2,
        )
        + "\n"
    )
    return returncode


if __name__ == "__main__":
    sys.exit(main())
