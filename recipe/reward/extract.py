"""Final-answer extraction for rule-based math rewards: find the response's final answer, then normalise it.

Pure Python (stdlib only), linear time in the input, safe on hostile model output:

* Only the last ``MAX_SEARCH_CHARS`` characters of a response are searched (the final answer sits at the
  end of a chain of thought; a 1 MB response costs the same as an 8 KB one).
* Brace matching is a single forward scan; the number of ``\\boxed`` candidates tried is capped.
* No regex has nested quantifiers, so none can backtrack catastrophically.
* Nothing is ever evaluated (no ``eval``/``exec``/``sympify``): these functions only move characters.

Which answer (``extract_answer``): the response's LAST final-answer marker wins, whichever kind it is:

* a ``\\boxed{...}``/``\\fbox{...}`` with balanced braces; a run of boxes with only separators between them
  (``\\boxed{2} and \\boxed{3}``, ``\\boxed{1}, \\boxed{4}``) is one answer, joined as ``2, 3``;
* an ``Answer:`` label (DAPO-Math-17k's format) or "the final answer is"; the rest of its line (or the next
  line when the label ends its line) is the answer, cut at the end of its sentence (``42. I hope it is
  correct.``), before a parenthetical remark (``42 (the number of ways)``) and before ``, which ...``-style
  clauses; when what is left is prose (``The volume is 120``), the last math span or number in it;
* "the answer is" counts only when what follows starts like an answer (``the answer is 42``, not
  ``this answer is correct``).

Without any marker, the fallback is the last math span (``$...$``, ``\\(...\\)``, ``\\[...\\]``) or number
expression, whichever ends last. A number expression is always whole: a signed or decimal number with
its thousands separators, a fraction ``2/3``, a tuple or interval ``(7, 6)``/``[2, 5)``, and a number
glued to letters or LaTeX (``2\\sqrt{3}``, ``\\frac{2}{3}``, ``AZ2A``) extends to its whole token, so a
fallback never cuts a wrong answer into a right one. ``normalize_answer`` (``recipe.reward.normalize``)
then gives the canonical ``pred``, whatever the marker: ``Answer: 42.`` and ``\\boxed{42}`` both give ``42``.
"""

from __future__ import annotations

import re

from recipe.reward.latex_scan import Span, boxed_spans, last_boxed, math_spans, sanitize_text
from recipe.reward.normalize import MAX_ANSWER_CHARS, normalize_answer

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
# An answer line is read up to this many characters.
_MAX_TAIL_CHARS = 2048

# Markers, matched where "answer" occurs: "Answer:", "Answers:", "**Answer:**", "Final Answer:" and
# "the final answer is" are strong; "the answer is" is weak (it must be followed by something answer-like).
_LABEL_RE = re.compile(r"answers?[ \t*]*:", re.IGNORECASE)
_ANSWER_IS_RE = re.compile(r"answer[ \t*]*is\b[ \t]*:?", re.IGNORECASE)
_FINAL_BEFORE_RE = re.compile(r"final[ \t]+$", re.IGNORECASE)
# what may stand between two boxes of one answer: spaces, punctuation, math delimiters, spacing, "and",
# "or", a \text{...} remark, a variable label ("y_2 =")
_BOX_SEPARATOR_RE = re.compile(
    r"(?:\s|[,;.]|\$|\\[()\[\]]|\\q?quad\b|\\[,;:! ]|\band\b|\bor\b|\\text\{[^{}]{0,80}\}"
    r"|[A-Za-z](?:_\{?\w{1,8}\}?)?\s?=)*"
)
# chat special tokens and closing tags end an answer line
_SPECIAL_TOKEN_RE = re.compile(r"<\||</")
_MAX_SEPARATOR_CHARS = 200
_MAX_REMARK_CHARS = 200
# a clause that follows the answer on its line: ", which is ...", ", since ..."
_CLAUSE_RE = re.compile(
    r",[ \t]+(?:which|where|since|because|so|as|that|i\.e\.|hence|thus|therefore|meaning|giving|for|when)\b",
    re.IGNORECASE,
)
# a signed integer or decimal with optional thousands separators ("1,250", "1 250"), or ".5"
_NUMBER = (
    r"(?:[-+\u2212])?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d{1,3}(?:[ \u2009\u202f]\d{3})+(?!\d)|\d+)(?:\.\d+)?"
    r"|(?:[-+\u2212])?\.\d+"
)
_FRACTION = rf"(?:{_NUMBER})(?:[ \t]*/[ \t]*(?:{_NUMBER}))?"
# a tuple or interval of numbers, else a number or fraction (optional percent sign), or a list of them
# ("3, 4", "2 and 3": a list is one answer, never cut to its last element)
_NUMBER_EXPR_RE = re.compile(
    rf"[(\[][ \t]*(?:{_FRACTION})(?:[ \t]*,[ \t]*(?:{_FRACTION}))+[ \t]*[)\]]"
    rf"|(?:{_FRACTION})(?:[ \t]*\\?%)?(?:(?:[ \t]*,[ \t]*|[ \t]+(?:and|or)[ \t]+)(?:{_FRACTION})(?:[ \t]*\\?%)?)*"
)
# an operator between two tokens of one expression ("3 \times 10^{5}", "2 + 3", "x = 5")
_OPERATOR_TOKEN_RE = re.compile(r"(?:\\times|\\cdot|\\div|\\pm|[-+*/^=\u00d7\u00b7])")
# an operand: anything with a digit or a LaTeX command, or one variable ("x", "a_1"); not a word
_OPERAND_RE = re.compile(r"[\d\\]|^[(\[]?[A-Za-z](?:_\{?\w+\}?)?[)\]]?$")
_MAX_RUN_TOKENS = 8
# unit symbols that may follow a number directly ("5cm", "1,000.99m²") without making it an expression
_UNITS = frozenset({"m", "cm", "mm", "km", "g", "kg", "mg", "s", "ms", "h", "min", "l", "ml"})
_WORD_RE = re.compile(r"[A-Za-z]{2,}")
_NOT_PROSE = frozenset({"and", "or"})
# what is not prose in an answer line: \text{...} groups, LaTeX commands, $...$ math
_MASK_RE = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm|operatorname)\{[^{}]*\}|\\[A-Za-z]+|\$[^$]*\$")
# what "the answer is" must be followed by to count as a marker: a number, math, a bracket, "x ="
_ANSWER_START_RE = re.compile(r"[-+\u2212\d$\\(\[{]|\.\d|[A-Za-z](?:_\{?\w+\}?)?[ \t]*(?:=|\\in\b)")


def _is_prose(s: str) -> bool:
    """Words outside math and LaTeX commands (``The volume is 120``; not ``x = 3``, ``2 and 3``, ``3 \\text{ cm}``)."""
    bare = _MASK_RE.sub(" ", s)
    return any(w.lower() not in _NOT_PROSE for w in _WORD_RE.findall(bare))


def _balanced_token(text: str, start: int, end: int) -> tuple[int, int]:
    """The token around ``text[start:end]``: bounded by whitespace or ``$`` outside brace groups, on its line.

    Whitespace inside a brace group does not end the token (``\\frac{1 + \\sqrt{5}}{2}`` is one token).
    One pass over at most ``MAX_ANSWER_CHARS`` characters each way.
    """
    lo = max(text.rfind("\n", 0, start) + 1, start - MAX_ANSWER_CHARS)
    newline = text.find("\n", end)
    hi = min(len(text) if newline == -1 else newline, end + MAX_ANSWER_CHARS)
    depth_before = []  # brace depth before each character of text[lo:hi], unbalanced closers clamped at 0
    depth = 0
    for c in text[lo:hi]:
        depth_before.append(depth)
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)

    def boundary(i: int) -> bool:
        return (text[i].isspace() or text[i] == "$") and depth_before[i - lo] == 0

    left = start
    while left > lo and not boundary(left - 1):
        left -= 1
    right = end
    while right < hi and not boundary(right):
        right += 1
    return left, right


def _glued(text: str, start: int, end: int) -> bool:
    """A number that is part of a larger expression: letters, LaTeX or braces touch it on either side."""
    before = text[start - 1] if start > 0 else " "
    if before.isalnum() or before in "{}^_\\/":
        return True
    if before in "([" and start > 1 and text[start - 2].isalnum():
        return True  # an argument: "f(3)", "a[2]"
    m = re.match(r"[A-Za-z]+", text[end : end + 8])
    if m:  # "2x", "2A" are expressions; "5cm", "1,000.99m²" a number and its unit
        follows = text[end + m.end() : end + m.end() + 1]
        return m.group(0) not in _UNITS or (follows.isascii() and follows.isalnum())
    after = text[end] if end < len(text) else " "
    return after in "{}^_\\"


def _operator_run(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen ``text[start:end]`` over space-separated operators and their operands on the same line:
    ``10^{5}`` in ``is 3 \\times 10^{5}`` becomes ``3 \\times 10^{5}``, ``3`` in ``2 + 3`` becomes ``2 + 3``."""
    for _ in range(_MAX_RUN_TOKENS):
        m = re.search(r"(\S+)[ \t]+(\S+)[ \t]+$", text[max(0, start - 64) : start])
        if m is None or not _OPERATOR_TOKEN_RE.fullmatch(m.group(2)) or not _OPERAND_RE.search(m.group(1)):
            break
        start -= len(m.group(0))
    for _ in range(_MAX_RUN_TOKENS):
        m = re.match(r"[ \t]+(\S+)[ \t]+(\S+)", text[end : end + 64])
        if m is None or not _OPERATOR_TOKEN_RE.fullmatch(m.group(1)) or not _OPERAND_RE.search(m.group(2)):
            break
        end += len(m.group(0))
    return start, end


def _number_span(text: str, m: re.Match[str]) -> Span | None:
    """The whole expression around a number match: widened to its token when glued to letters or LaTeX,
    then over the operators around it."""
    start, end = m.span()
    if _glued(text, start, end):
        start, end = _balanced_token(text, start, end)
    start, end = _operator_run(text, start, end)
    value = text[start:end].strip().rstrip(".,;:!?").strip()
    return Span(start, end, value) if value else None


def _last_candidate(text: str) -> str | None:
    """The last math span or whole number expression, whichever ends last (spans win ties)."""
    spans = [s for s in math_spans(text) if s.content.strip()]
    last = None
    for m in _NUMBER_EXPR_RE.finditer(text):
        last = m
    number = _number_span(text, last) if last is not None else None
    candidates = [c for c in (spans[-1] if spans else None, number) if c is not None]
    if not candidates:
        return None
    best = max(candidates, key=lambda c: (c.end, c in spans))
    return best.content.strip()


def _parenthetical_end(line: str, open_pos: int) -> int:
    """Index just past the bracket closing ``line[open_pos]``, or -1 (a remark is at most 200 characters)."""
    depth = 0
    for i in range(open_pos, min(len(line), open_pos + _MAX_REMARK_CHARS)):
        if line[i] in "([":
            depth += 1
        elif line[i] in ")]":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _trim_answer_line(line: str) -> str:
    """The answer at the start of an answer line, without the prose that follows it.

    Cuts (outside ``$...$`` and brackets) at a sentence end (``.``/``?``/``!`` followed by a space),
    before a parenthetical remark with words in it, and before a ``, which ...`` clause.
    """
    depth, in_math, i, n = 0, False, 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\" and i + 1 < n:
            i += 2  # an escaped character or the first letter of a command
            continue
        if c == "$":
            in_math = not in_math
        elif not in_math:
            if c in "([{":
                if c == "(" and depth == 0 and line[:i].strip():
                    close = _parenthetical_end(line, i)
                    if close != -1 and _is_prose(line[i + 1 : close - 1]):
                        break
                depth += 1
            elif c in ")]}":
                depth = max(0, depth - 1)
            elif depth == 0 and c in ".?" and (i + 1 == n or line[i + 1].isspace()):
                break  # a sentence end ("!" at the end is a factorial: it only ends a sentence before a space)
            elif depth == 0 and c == "!" and i + 1 < n and line[i + 1].isspace():
                break
        i += 1
    head = line[:i]
    m = _CLAUSE_RE.search(head)
    return (head[: m.start()] if m else head).strip()


def _answer_line(text: str, pos: int) -> str | None:
    """What follows a marker ending at ``pos``: the rest of its line, or the next non-empty line."""
    rest = text[pos : pos + _MAX_TAIL_CHARS].lstrip(" \t*#:}")  # "}": the end of "\\textbf{Answer:}"
    lines = rest.split("\n", 3)
    line = lines[0].strip()
    if not line and len(lines) > 1:
        line = next((x.strip() for x in lines[1:3] if x.strip()), "")
    line = _SPECIAL_TOKEN_RE.split(line, maxsplit=1)[0]  # "42<|im_end|>", "42</answer>"
    line = line.strip("*").strip()
    if line.startswith(('"', '\\"')):
        line = line.replace('\\"', "").strip('"').strip()
    return line or None


def _from_prose(answer: str) -> str:
    """The answer inside a prose answer line.

    ``42 is the number of ways`` -> ``42`` (the math before the first word), ``The volume of $V$ is 120`` ->
    ``120`` and ``It is not 5 but 6`` -> ``6`` (the last math span or number); a line with no number or math
    (``no solution``) stays as it is.
    """
    masked = _MASK_RE.sub(lambda m: " " * len(m.group(0)), answer)
    word = next((w for w in _WORD_RE.finditer(masked) if w.group(0).lower() not in _NOT_PROSE), None)
    lead = answer[: word.start()].rstrip(" \t,;:-") if word else answer
    if lead and (_NUMBER_EXPR_RE.search(lead) or math_spans(lead)):
        return lead
    return _last_candidate(answer) or answer


def _answer_from_line(line: str) -> str | None:
    answer = _trim_answer_line(line).rstrip(",;:").strip()
    if answer and _is_prose(answer):
        answer = _from_prose(answer)
    return answer or None


def _box_run(text: str, boxes: list[Span]) -> str:
    """The last box joined with the boxes right before it when only separators stand between them."""
    run = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        gap = text[prev.end : run[0].start]
        if len(gap) > _MAX_SEPARATOR_CHARS or not _BOX_SEPARATOR_RE.fullmatch(gap):
            break
        run.insert(0, prev)
    return ", ".join(b.content.strip() for b in run)


def _markers(text: str, start: int) -> list[tuple[int, int, bool]]:
    """(start, end, strong) of the answer markers in ``text[start:]``, in text order.

    Located with ``str.find`` on "answer" (linear, in C), then matched in place.
    """
    low = text.lower()
    found = []
    i = low.find("answer", start)
    while i != -1:
        if i == 0 or not low[i - 1].isalnum():
            final = _FINAL_BEFORE_RE.search(low, max(0, i - 16), i)
            m = _LABEL_RE.match(text, i)
            if m:
                found.append((final.start() if final else i, m.end(), True))
            else:
                m = _ANSWER_IS_RE.match(text, i)
                if m:
                    found.append((final.start() if final else i, m.end(), final is not None))
        i = low.find("answer", i + 6)
    return found


def _from_markers(text: str) -> str | None:
    """The answer at the last final-answer marker, or None when the response has none."""
    boxes = [b for b in boxed_spans(text) if b.content.strip()]
    last_box = boxes[-1] if boxes else None
    after = last_box.start if last_box else -1
    for start, end, strong in reversed(_markers(text, after + 1)):
        if last_box is not None and start < last_box.end:
            continue  # "answer is" written inside the box itself
        line = _answer_line(text, end)
        if line is None:
            continue
        if strong:
            answer = _answer_from_line(line)
        else:
            answer = _answer_from_line(line) if _ANSWER_START_RE.match(line) else None
        if answer:
            return answer
    return _box_run(text, boxes) if boxes else None


def extract_answer(solution: object) -> str:
    """Raw final-answer string of a response ("" when none), before normalisation.

    Only the last ``MAX_SEARCH_CHARS`` characters are searched.
    """
    text = sanitize_text(solution)[-MAX_SEARCH_CHARS:]
    found = _from_markers(text)
    if found is None:
        found = _last_candidate(text)
    return (found or "").strip()[:MAX_ANSWER_CHARS]


def extract_and_normalize(solution: object) -> str:
    """``normalize_answer(extract_answer(solution))``: the ``pred`` a reward returns."""
    return normalize_answer(extract_answer(solution))
