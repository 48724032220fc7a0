"""Normalisation of an extracted final answer to one canonical string.

The canonical string is the ``pred`` the reward returns: equivalent surface forms map to one string, so
the consistency entropy of a group counts one outcome class per answer (``$\\dfrac{1}{2}$`` and
``\\frac12`` both give ``\\frac{1}{2}``; ``5 \\text{ cm}``, `` 5 `` and ``5.`` all give ``5``). Linear time,
never raises, never evaluates anything.
"""

from __future__ import annotations

import re

from recipe.reward.latex_scan import last_boxed, match_braces, sanitize_text

__all__ = ["MAX_ANSWER_CHARS", "normalize_answer"]

# A longer answer is not a final answer but runaway text: it is cut to this length.
MAX_ANSWER_CHARS = 1024

_TEXT_CMDS = (
    "\\text",
    "\\textbf",
    "\\textit",
    "\\textnormal",
    "\\mbox",
    "\\mathrm",
    "\\mathbf",
    "\\textrm",
    "\\operatorname",
)
# LaTeX spacing; "\\ " is a matrix row break, not a spacing command
_SPACING_RE = re.compile(r"(?<!\\)\\[,;:! ]|\\quad|\\qquad")
# Spaces to drop: all but those between two letters, and ", " in "32, 349" (a list: without its space
# math-verify would read "32,349" as thirty-two thousand). The first alternative matches the kept ", ".
_SPACES_RE = re.compile(r"(?<=\d), (?=\d{3}(?!\d))|(?<![A-Za-z]) | (?![A-Za-z])")
# 1,234 / 1,234.5 with no space after the commas ("32, 349" is a list of two numbers)
_THOUSANDS_RE = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
# LaTeX thousands separators: 1{,}234, 1{, }234, 11,\!111 (before spacing commands become spaces)
_LATEX_THOUSANDS_RE = re.compile(r"(?<=\d) ?(?:\{ ?, ?\}|,\\!) ?(?=\d{3})")
_INT_FRAC_RE = re.compile(r"^(-?)(\d+)/(\d+)$")
_SHORT_FRAC_RE = re.compile(r"\\frac(\d)(\d)")
_SHORT_FRAC_ARG_RE = re.compile(r"\\frac\{([^{}]*)\}(\d)")
_SHORT_SQRT_RE = re.compile(r"\\sqrt(\d+)")
_TRAILING_ZEROS_RE = re.compile(r"^(-?\d+)\.0+$")
_LEADING_DOT_RE = re.compile(r"(?<![\d.])\.(\d)")
# "5 cm", "12 dollars", "3 square units": a number followed by plain words (letters only, >= 2 each).
_NUMBER_WORDS_RE = re.compile(r"^(-?[\d.,/]+)[ \t]+[A-Za-z]{2,}(?:[ \t]+[A-Za-z]{2,})*\.?$")
# a single variable as the left side of "x = 5" or "x \in [0, 1)": "x", "a_1", "k_{12}"
_SIMPLE_LHS_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?$")
_RELATION_RE = re.compile(r"[<>!:]|\\(?:le|ge|ne|leq|geq|neq|lt|gt|approx|sim|equiv|cong)(?![A-Za-z])")
_IN_SET_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)? ?\\in ")
_COMMAND_RE = re.compile(r"\\[A-Za-z]+")
_WS_RE = re.compile(r"\s+")


def _strip_text_commands(s: str) -> str:
    """Unwrap an answer that is entirely ``\\text{X}`` to ``X``; drop trailing ``\\text{units}`` after math."""
    for _ in range(4):  # nested unwraps, bounded
        changed = False
        for cmd in _TEXT_CMDS:
            if s.startswith(cmd + "{"):
                close = match_braces(s, len(cmd))
                if close == len(s) - 1:
                    s = s[len(cmd) + 1 : close].strip()
                    changed = True
                    break
        if not changed:
            break
    # trailing "\text{ cm}" / "\mbox{dollars}" after a non-empty mathematical part
    for cmd in _TEXT_CMDS:
        idx = s.rfind(cmd + "{")
        if idx > 0 and match_braces(s, idx + len(cmd)) == len(s) - 1:
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


def _is_constant(expr: str) -> bool:
    """No free variable: nothing but numbers, operators and LaTeX commands (``\\frac``, ``\\pi``, ``\\sqrt``)."""
    return re.search(r"[A-Za-z]", _COMMAND_RE.sub("", expr)) is None


def normalize_answer(answer: object) -> str:
    """Canonical string of an answer (``""`` for none). Never raises; linear time.

    Rules (applied in order): UTF-8 sanitising and a length cap; outer ``$``/``\\(\\)``/``\\boxed{}``
    removed; ``\\left``/``\\right``/``\\displaystyle`` removed; inner ``$`` delimiters removed; LaTeX thousands separators (``1{,}000``,
    ``1,\\!000``) removed, then LaTeX spacing; ``\\dfrac``/``\\tfrac`` to ``\\frac``; ``\\frac12``/``\\sqrt2``
    braced; ``\\text{X}`` unwrapped when it is the whole answer and dropped when it trails math (units);
    degrees and percent signs dropped (MATH convention); "5 cm" to "5"; ``x = 5`` and ``2^{10} = 1024`` to
    their last value when the left side is one variable or a constant and every right side is a constant
    (``y = 2x + 1``, ``x + y = 5`` and relations stay whole);
    ``x \\in [0, 1)`` to ``[0,1)``; thousands separators ``1,000`` removed (not ``1, 000``, a list);
    ``3/4`` to ``\\frac{3}{4}``; ``5.0`` to ``5``, ``.5`` to ``0.5``; whitespace removed except between two
    letters (so ``\\pi r`` keeps its space); a trailing full stop dropped.
    """
    s = sanitize_text(answer)[:MAX_ANSWER_CHARS]
    s = s.replace("\u2212", "-").replace("\u00b0", "")  # unicode minus, degree sign
    s = _WS_RE.sub(" ", s).strip()
    s = _strip_outer(s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\displaystyle", "")
    s = _LATEX_THOUSANDS_RE.sub("", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _SPACING_RE.sub(" ", s)
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\circ", "")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("\\$", "").replace("$", "")  # a currency sign, then math delimiters inside ("$5$ and $6$")
    s = _WS_RE.sub(" ", s).strip()
    s = _strip_text_commands(s)
    s = _strip_outer(s)
    if s.endswith("."):
        s = s[:-1].rstrip()
    m = _NUMBER_WORDS_RE.match(s)
    if m:
        s = m.group(1)
    # "x = 5" -> "5", "2^{10} = 1024" -> "1024", "x = 5+6 = 11" -> "11": a variable or a constant set to
    # constants is its last value; keep "x+y=5", "y = 2x + 1" and relations ("x <= 5", "3 \\neq 4")
    parts = [p.strip() for p in s.split("=")]
    if (
        len(parts) > 1
        and parts[-1]
        and not _RELATION_RE.search(s)
        and (_SIMPLE_LHS_RE.match(parts[0]) or _is_constant(parts[0]))
        and all(_is_constant(p) for p in parts[1:])
    ):
        s = parts[-1]
    m = _IN_SET_RE.match(s)
    if m:
        s = s[m.end() :].strip()
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    s = _SHORT_FRAC_RE.sub(r"\\frac{\1}{\2}", s)
    s = _SHORT_FRAC_ARG_RE.sub(r"\\frac{\1}{\2}", s)
    s = _SHORT_SQRT_RE.sub(r"\\sqrt{\1}", s)
    # whitespace: drop unless it separates two letters ("\pi r", "no solution") or a list from a
    # thousands look-alike ("32, 349")
    s = _SPACES_RE.sub(lambda m: m.group(0) if m.group(0).startswith(",") else "", s)
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
