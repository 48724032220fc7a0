"""Run a command line up to its argument parsing and report on its argparse parser, as one JSON line.

    python -m tests.argparse_probe TARGET '[["--opt", "v"], ...]'

TARGET is a script's path or ``-m:module``. It runs as ``__main__`` in this process (a subprocess of the
test, as a user would start it) until its first ``parse_known_args`` / ``parse_args``, which stops it
before it does any work. Printed: ``{"undocumented": [options whose default the help does not state],
"errors": [argparse's complaint about each argument list, or null]}``. tests/test_docs.py uses it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import runpy
import sys
from pathlib import Path


class _Captured(BaseException):  # BaseException: a script's `except Exception` does not swallow it
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def capture_parser(target: str) -> argparse.ArgumentParser:
    original = argparse.ArgumentParser.parse_known_args

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> object:
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    sys.argv = [target]
    try:
        if target.startswith("-m:"):
            runpy.run_module(target[3:], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    raise SystemExit(f"{target} parsed no arguments")


def args_error(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """argparse's complaint about ``args`` (unknown options included), or None when they parse."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, rest = parser.parse_known_args(args)
    except SystemExit:
        return err.getvalue().strip().splitlines()[-1]
    unknown = [a for a in rest if a.startswith("-")]
    return f"unrecognized arguments: {' '.join(unknown)}" if unknown else None


def undocumented_defaults(parser: argparse.ArgumentParser) -> list[str]:
    """Options whose default is a value their help does not state (``%(default)s``, "default X" or "[X]")."""
    if issubclass(parser.formatter_class, argparse.ArgumentDefaultsHelpFormatter):
        return []
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                missing += [m for m in undocumented_defaults(sub) if m not in missing]
            continue
        default = action.default
        no_value = default is None or default is False or default == argparse.SUPPRESS or default == []
        if no_value or isinstance(action, argparse._HelpAction | argparse._StoreTrueAction):
            continue
        help_text = action.help or ""
        shown = [str(default)] if not isinstance(default, list | tuple) else [" ".join(map(str, default))]
        if isinstance(default, Path) and default.is_relative_to(Path.cwd()):
            shown.append(
                default.relative_to(Path.cwd()).as_posix()
            )  # "default: runs/x" for REPO / "runs" / "x"
        stated = any(
            re.search(r"default\W{1,3}" + re.escape(s) + r"(?![\w.])", help_text) or f"[{s}]" in help_text
            for s in shown
        )
        if "%(default)" not in help_text and not stated:
            missing.append(f"{'/'.join(action.option_strings) or action.dest} (default {default!r})")
    return missing


def main() -> None:
    target, trials = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
    stdout = sys.stdout
    with contextlib.redirect_stdout(io.StringIO()):  # whatever the script prints before parsing
        parser = capture_parser(target)
    report = {
        "undocumented": undocumented_defaults(parser),
        "errors": [args_error(parser, t) for t in trials],
    }
    print(json.dumps(report), file=stdout)


if __name__ == "__main__":
    main()
