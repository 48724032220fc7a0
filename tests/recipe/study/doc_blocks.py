"""The docs' generated blocks for the study tests: read them, and check each against its derivation."""

from __future__ import annotations

from collections.abc import Mapping

from recipe.study.common import docs


def doc_blocks(prefix: str = "") -> dict[tuple[str, str], str]:
    """``{(doc file name, block name): body}`` of every generated block in ``docs.DOCS`` whose name starts
    with ``prefix``."""
    return {
        (doc.name, name): body
        for doc in docs.DOCS
        for name, body in docs.fragments_in(doc.read_text()).items()
        if name.startswith(prefix)
    }


def assert_blocks_derived(
    blocks: Mapping[tuple[str, str], str], derived: Mapping[str, str], source: str = "its derivation"
) -> None:
    """Every block equals what ``derived`` holds under its name after the prefix; a block ``derived`` has no
    entry for (a phase not run yet) must state nothing."""
    for (doc, name), body in blocks.items():
        key = name.split("/", 1)[1]
        if key not in derived:
            assert body == "", f"{doc}: block {name} states figures that no committed data derives"
            continue
        assert body == derived[key], f"{doc}: block {name} differs from {source}"
