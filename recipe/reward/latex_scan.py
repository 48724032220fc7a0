"""Linear-time scanning primitives for model output: UTF-8 sanitising, brace matching, boxes, math spans.

Pure Python (stdlib only). Every function is linear in its input (or bounded by a constant number of
linear passes), and no regex here has nested quantifiers, so hostile text cannot make any of them
backtrack catastrophically. Nothing is ever evaluated: these functions only find and move characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Span", "sanitize_text", "match_braces", "boxed_spans", "last_boxed", "math_spans"]

# At most this many ``\boxed`` occurrences (from the last) are brace-matched.
MAX_BOXED_TRIES = 16

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)")
_MATH_OPEN_RE = re.compile(r"\$\$|\$|\\\(|\\\[")
_MATH_CLOSE = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
# inline math ($...$, \(...\)) must close on its own line, as in LaTeX and Math-Verify; display math may span lines
_INLINE = ("$", "\\(")


@dataclass(frozen=True)
class Span:
    """``text[start:end]`` is the whole construct (``\\boxed{...}``, ``$...$``); ``content`` is what it holds."""

    start: int
    end: int
    content: str


def sanitize_text(text: object) -> str:
    """Return ``text`` as a valid-UTF-8 ``str``: bytes are decoded with replacement, lone surrogates become ``?``.

    Hostile or truncated generations may carry invalid UTF-8; downstream parsers, pickling and logging
    must never see a string that cannot be encoded.
    """
    if isinstance(text, bytes | bytearray):
        return bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")


def match_braces(text: str, open_pos: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_pos``, or -1 if unbalanced. One linear scan."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "{}":
            i += 2  # escaped brace (\{ \}) does not count for nesting
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _box_at(text: str, start: int, end_of_command: int) -> Span | None:
    """The box whose command spans ``text[start:end_of_command]``: ``\\boxed{...}`` with balanced braces,
    or ``\\boxed 5`` (the next whitespace-free token); None when unbalanced or empty."""
    j = end_of_command
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == "{":
        close = match_braces(text, j)
        if close == -1:
            return None
        return Span(start, close + 1, text[j + 1 : close])
    if end_of_command < len(text) and text[end_of_command] == " ":
        token = text[j:].split(None, 1)
        if token:
            value = token[0].rstrip("$.")
            return Span(start, j + len(token[0]), value) if value else None
    return None


def boxed_spans(text: str) -> list[Span]:
    """Complete ``\\boxed``/``\\fbox`` constructs among the last ``MAX_BOXED_TRIES`` occurrences, in text order.

    A truncated final box (unbalanced braces) is skipped, so the previous complete one stays visible.
    A box nested inside a later-listed box is dropped (the outer box is the answer).
    """
    commands = [(m.start(), m.end()) for m in _BOXED_RE.finditer(text)][-MAX_BOXED_TRIES:]
    spans = [s for s in (_box_at(text, a, b) for a, b in commands) if s is not None]
    outer: list[Span] = []
    for span in spans:
        if outer and span.end <= outer[-1].end:
            continue  # nested in the previous box
        outer.append(span)
    return outer


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}``/``\\fbox{...}`` (or ``\\boxed 5``), else None.

    A box that holds only another box is unwrapped (``\\boxed{\\boxed{8}}`` gives ``8``).
    """
    spans = boxed_spans(text)
    if not spans:
        return None
    content = spans[-1].content
    for _ in range(4):
        inner = boxed_spans(content.strip())
        if len(inner) != 1 or inner[0].start != 0 or inner[0].end != len(content.strip()):
            break
        content = inner[0].content
    return content


def _unescaped_find(text: str, needle: str, start: int) -> int:
    """``text.find(needle, start)`` skipping occurrences escaped by a backslash (``\\$`` is a dollar sign)."""
    pos = text.find(needle, start)
    while pos > 0 and needle == "$" and text[pos - 1] == "\\":
        pos = text.find(needle, pos + 1)
    return pos


def math_spans(text: str) -> list[Span]:
    """Math-mode spans ``$$...$$``, ``\\[...\\]`` (multi-line) and ``$...$``, ``\\(...\\)`` (one line), in text order.

    One left-to-right pass; the next closer of each kind is cached, so many openers sharing one distant
    closer (or none) cost linear time, not quadratic.
    """
    spans: list[Span] = []
    next_close: dict[str, int] = {}
    i, n = 0, len(text)
    while i < n:
        m = _MATH_OPEN_RE.search(text, i)
        if m is None:
            break
        opener, start = m.group(0), m.start()
        if opener == "$" and start > 0 and text[start - 1] == "\\":
            i = start + 1  # an escaped dollar sign, not math
            continue
        closer = _MATH_CLOSE[opener]
        body = m.end()
        cached = next_close.get(opener)
        if cached is None or (cached != -1 and cached < body):
            cached = _unescaped_find(text, closer, body)
            next_close[opener] = cached
        if cached == -1:
            i = body  # no closer of this kind anywhere after: this opener is plain text
            continue
        if opener in _INLINE and text.find("\n", body, cached) != -1:
            i = body
            continue
        spans.append(Span(start, cached + len(closer), text[body:cached]))
        i = cached + len(closer)
    return spans
