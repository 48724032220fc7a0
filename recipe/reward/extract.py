"""Final-answer extraction and normalisation for rule-based math rewards.

Pure Python (stdlib only), linear time in the input, safe on hostile model output:

* Only the last ``MAX_SEARCH_CHARS`` characters of a response are searched (the final answer
  sits at the end of a chain of thought; a 1 MB response costs the same as an 8 KB one).
* Brace matching is a single forward scan; the number of ``\\boxed`` candidates tried is capped.
* Every regex below is free of nested quantifiers, so none can backtrack catastrophically.
* Nothing is ever evaluated (no ``eval``/``exec``/``sympify``): these functions only move characters.

Extraction order (``extract_answer``): the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced
braces, else an ``Answer:`` / ``answer is`` tail, else the last number. Normalisation
(``normalize_answer``) maps equivalent surface forms to one string so that the consistency entropy
of a group counts one outcome class per answer, e.g. ``$\\dfrac{1}{2}$`` and ``\\frac12`` both give
``\\frac{1}{2}``, ``5 \\text{ cm}`` and `` 5 `` both give ``5``.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_SEARCH_CHARS",
    "MAX_ANSWER_CHARS",
    "sanitize_text",
    "last_boxed",
    "extract_answer",
    "normalize_answer",
    "extract_and_normalize",
]

# Only this many trailing characters of a response are searched for the final answer.
MAX_SEARCH_CHARS = 8192
# A longer extracted answer is not a final answer but runaway text: it is cut to this length.
MAX_ANSWER_CHARS = 1024
# At most this many ``\boxed`` occurrences are tried (from the last) before giving up.
_MAX_BOXED_TRIES = 16

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)")
# "The final answer is: 5" / "Answer: 5" / "answer is 5". ``[ \t]*`` and a fixed word list keep it linear.
_ANSWER_TAIL_RE = re.compile(r"answer[ \t*]*(?:is[ \t]*:?|:)[ \t*]*", re.IGNORECASE)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")

_TEXT_CMDS = (
    "\\text",
    "\\textbf",
    "\\textit",
    "\\mbox",
    "\\mathrm",
    "\\mathbf",
    "\\textrm",
    "\\operatorname",
)
_SPACING_RE = re.compile(r"\\[,;:! ]|\\quad|\\qquad")
_THOUSANDS_RE = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_LATEX_THOUSANDS_RE = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
_INT_FRAC_RE = re.compile(r"^(-?)(\d+)/(\d+)$")
_SHORT_FRAC_RE = re.compile(r"\\frac(\d)(\d)")
_SHORT_FRAC_ARG_RE = re.compile(r"\\frac\{([^{}]*)\}(\d)")
_SHORT_SQRT_RE = re.compile(r"\\sqrt(\d+)")
_TRAILING_ZEROS_RE = re.compile(r"^(-?\d+)\.0+$")
_LEADING_DOT_RE = re.compile(r"(?<![\d.])\.(\d)")
# "5 cm", "12 dollars", "3 square units": a number followed by plain words (letters only, >= 2 each).
_NUMBER_WORDS_RE = re.compile(r"^(-?[\d.,/]+)[ \t]+[A-Za-z]{2,}(?:[ \t]+[A-Za-z]{2,})*\.?$")
_SIMPLE_LHS_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?$")
_WS_RE = re.compile(r"\s+")


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


def _match_braces(text: str, open_pos: int) -> int:
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


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``/``\\fbox{...}`` with balanced braces (or ``\\boxed 5``), else None.

    Candidates are tried from the last one backwards, at most ``_MAX_BOXED_TRIES`` of them, so an
    unbalanced final box (a truncated response) falls back to the previous complete one.
    """
    starts = [m.end() for m in _BOXED_RE.finditer(text)]
    for end in reversed(starts[-_MAX_BOXED_TRIES:]):
        j = end
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            close = _match_braces(text, j)
            if close != -1:
                return text[j + 1 : close]
        elif end < len(text) and text[end] == " ":
            # "\boxed 5": the argument is the next whitespace-free token
            token = text[j:].split(None, 1)
            if token:
                return token[0].rstrip("$.")
    return None


def _answer_tail(text: str) -> str | None:
    """Text after the last ``Answer:``/``answer is`` up to the end of its line, or None."""
    last = None
    for m in _ANSWER_TAIL_RE.finditer(text):
        last = m
    if last is None:
        return None
    tail = text[last.end() :].split("\n", 1)[0].strip().strip("*").strip()
    # a boxed answer after "answer is" is handled by last_boxed; a trailing full stop is punctuation
    if tail.endswith("."):
        tail = tail[:-1]
    return tail or None


def _last_number(text: str) -> str | None:
    last = None
    for m in _NUMBER_RE.finditer(text):
        last = m
    return None if last is None else last.group(0).rstrip(",")


def extract_answer(solution: object) -> str:
    """Raw final-answer string of a response ("" when none), before normalisation.

    Only the last ``MAX_SEARCH_CHARS`` characters are searched.
    """
    text = sanitize_text(solution)[-MAX_SEARCH_CHARS:]
    for finder in (last_boxed, _answer_tail, _last_number):
        found = finder(text)
        if found is not None and found.strip():
            return found[:MAX_ANSWER_CHARS]
    return ""


def _strip_text_commands(s: str) -> str:
    """Unwrap an answer that is entirely ``\\text{X}`` to ``X``; drop trailing ``\\text{units}`` after math."""
    for _ in range(4):  # nested unwraps, bounded
        changed = False
        for cmd in _TEXT_CMDS:
            if s.startswith(cmd + "{"):
                close = _match_braces(s, len(cmd))
                if close == len(s) - 1:
                    s = s[len(cmd) + 1 : close].strip()
                    changed = True
                    break
        if not changed:
            break
    # trailing "\text{ cm}" / "\mbox{dollars}" after a non-empty mathematical part
    for cmd in _TEXT_CMDS:
        idx = s.rfind(cmd + "{")
        if idx > 0 and _match_braces(s, idx + len(cmd)) == len(s) - 1:
            head = s[:idx].strip()
            if head and head[-1] not in "{(^_":
                s = head
                break
    return s


def _strip_outer(s: str) -> str:
    """Remove wrappers that never change the value: ``$...$``, ``\\(...\\)``, nested ``\\boxed{}``."""
    for _ in range(8):
        before = s
        s = s.strip()
        if len(s) >= 2 and s.startswith("$") and s.endswith("$"):
            s = s.strip("$")
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2]
        if s.startswith("\\[") and s.endswith("\\]"):
            s = s[2:-2]
        inner = last_boxed(s) if s.startswith(("\\boxed", "\\fbox")) else None
        if inner is not None:
            s = inner
        if s == before:
            break
    return s


def normalize_answer(answer: object) -> str:
    """Canonical string of an answer (``""`` for none). Never raises; linear time.

    Rules (applied in order): UTF-8 sanitising and a length cap; outer ``$``/``\\(\\)``/``\\boxed{}``
    removed; ``\\left``/``\\right``/``\\displaystyle`` and LaTeX spacing removed; ``\\dfrac``/``\\tfrac``
    to ``\\frac``; ``\\frac12``/``\\sqrt2`` braced; ``\\text{X}`` unwrapped when it is the whole answer and
    dropped when it trails math (units); degrees and percent signs dropped (MATH convention);
    ``x = 5`` to ``5`` for a single-letter left side; "5 cm" to "5"; thousands separators removed;
    ``3/4`` to ``\\frac{3}{4}``; ``5.0`` to ``5``, ``.5`` to ``0.5``; whitespace removed except between
    two letters (so ``\\pi r`` keeps its space); a trailing full stop dropped.
    """
    s = sanitize_text(answer)[:MAX_ANSWER_CHARS]
    s = s.replace("\u2212", "-").replace("\u00b0", "")  # unicode minus, degree sign
    s = _WS_RE.sub(" ", s).strip()
    s = _strip_outer(s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _SPACING_RE.sub(" ", s)
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\circ", "")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("\\$", "")
    s = _LATEX_THOUSANDS_RE.sub("", s)
    s = _WS_RE.sub(" ", s).strip()
    s = _strip_text_commands(s)
    s = _strip_outer(s)
    if s.endswith("."):
        s = s[:-1].rstrip()
    m = _NUMBER_WORDS_RE.match(s)
    if m:
        s = m.group(1)
    # "x = 5" -> "5" when the left side is a single variable (e.g. "x", "a_1"); keep "x+y=5"
    if s.count("=") == 1:
        lhs, rhs = (p.strip() for p in s.split("="))
        if rhs and _SIMPLE_LHS_RE.match(lhs):
            s = rhs
    s = _SHORT_FRAC_RE.sub(r"\\frac{\1}{\2}", s)
    s = _SHORT_FRAC_ARG_RE.sub(r"\\frac{\1}{\2}", s)
    s = _SHORT_SQRT_RE.sub(r"\\sqrt{\1}", s)
    # whitespace: drop unless it separates two letters ("\pi r", "no solution")
    s = re.sub(r"(?<![A-Za-z]) | (?![A-Za-z])", "", s)
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    s = _LEADING_DOT_RE.sub(r"0.\1", s)
    m = _TRAILING_ZEROS_RE.match(s)
    if m:
        s = m.group(1)
    if s == "-0":
        s = "0"
    m = _INT_FRAC_RE.match(s)
    if m:
        s = f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}"
    return s


def extract_and_normalize(solution: object) -> str:
    """``normalize_answer(extract_answer(solution))``: the ``pred`` a reward returns."""
    return normalize_answer(extract_answer(solution))
