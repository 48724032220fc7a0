"""The docs' generated fragments: text between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``.

``NAME`` is a key of :func:`recipe.study.testbed2.report.report` (``testbed2/criteria``, ...) or of
:func:`recipe.study.testbed.budget.fragments` (``testbed/budget``, ...). :func:`update_docs` writes
the fragments into every doc that names them; :func:`fragments_in` reads them back, which is what the
docs test compares with a fresh report from the committed CSVs.
"""

from __future__ import annotations

import re
from pathlib import Path

from recipe.files import REPO_ROOT

DOCS = (REPO_ROOT / "docs" / "STUDY_CPU.md", REPO_ROOT / "docs" / "STUDY_PLAN.md", REPO_ROOT / "README.md")
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w/]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def fragments_in(text: str) -> dict[str, str]:
    """``name -> body`` of every generated block in ``text``."""
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def replace_fragments(text: str, fragments: dict[str, str]) -> str:
    """``text`` with each generated block whose name is in ``fragments`` replaced (others kept)."""

    def swap(m: re.Match[str]) -> str:
        body = fragments.get(m.group("name"))
        return m.group(0) if body is None else m.group(1) + body + m.group(4)

    return _BLOCK.sub(swap, text)


def update_docs(
    fragments: dict[str, str], prefix: str = "testbed2/", docs: tuple[Path, ...] = DOCS
) -> list[Path]:
    """Write ``fragments`` (names without ``prefix``) into the docs that include them; returns the docs changed."""
    named = {prefix + k: v for k, v in fragments.items()}
    changed = []
    for doc in docs:
        if not doc.is_file():
            continue
        text = doc.read_text()
        new = replace_fragments(text, named)
        if new != text:
            doc.write_text(new)
            changed.append(doc)
    return changed
