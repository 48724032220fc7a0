"""Math-verify worker process: one JSON request per stdin line, one JSON reply per stdout line.

Run by ``recipe.reward.pool.VerifyPool`` as ``python -I -u _worker.py`` (a fresh interpreter in
isolated mode: the script's folder is not on sys.path, so nothing in this package shadows what
math-verify or sympy import). It imports only the standard library and math-verify.

Protocol:
    startup  -> {"ready": true}            (after the heavy imports, so imports never count as a timeout)
    request  <- {"gold": str, "pred": str}
    reply    -> {"ok": bool}  or  {"ok": false, "error": "..."} when parsing/verifying raised

math-verify's own ``signal.alarm`` timeouts are switched off (``parsing_timeout=None``,
``timeout_seconds=None``); the parent enforces the time limit by killing this process. Only
``LatexExtractionConfig`` is used: its parser never calls ``eval``/``sympify`` on the text, unlike
``ExprExtractionConfig`` (``sympy.parse_expr``), so nothing from a model output is ever evaluated as code.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time


def _watch_parent(parent_pid: int) -> None:
    """Exit when the parent dies (stdin EOF does not arrive while a computation is running)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


def _verify(gold: str, pred: str) -> bool:
    from math_verify import LatexExtractionConfig, parse, verify

    config = (LatexExtractionConfig(boxed_match_priority=0),)
    gold_parsed = parse("\\boxed{" + gold + "}", config, parsing_timeout=None)
    pred_parsed = parse("\\boxed{" + pred + "}", config, parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def main() -> None:
    # math-verify logs a warning about disabled timeouts on first use: expected here, keep stderr quiet
    logging.disable(logging.WARNING)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    import math_verify  # noqa: F401  (heavy import before "ready")

    _verify("1", "1")  # warm caches and lazy imports (sympy, antlr) before the first timed request
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            reply = {"ok": _verify(str(req["gold"]), str(req["pred"]))}
        except Exception as exc:  # noqa: BLE001  (a parse error is a wrong answer, never a crash)
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
