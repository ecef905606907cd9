"""Answer extraction and equivalence checking for math problems (built on ``math_verify``).

The pipeline is::

    completion text --extract_answer--> "\\frac{1}{2}" --parse_answer--> [Rational(1, 2), "..."]
    gold answer     ------------------> "0.5"         --parse_answer--> [Rational(1, 2), "..."]
                                                    is_equivalent = math_verify.verify(gold, pred)

Before parsing, an answer string is normalised (:func:`normalize_answer`): a ``\\boxed{}`` wrapper,
math delimiters (``$..$``, ``\\(..\\)``, ``\\[..\\]``) and markdown bold (``**73**``) are removed,
and thousands separators are dropped when the whole answer is one number written with them
(``2,125`` / ``1,450,000`` / ``1{,}000``; a tuple such as ``(3, 125)`` is left alone). The result
is then parsed as the content of a ``\\boxed{...}`` by math_verify's LaTeX extractor, which makes
plain numbers, LaTeX and unenclosed tuples all parse the same way.

math_verify compares numbers with an absolute tolerance (6 decimals), so two tiny values are
"equal" (``\\frac{1}{2004!}`` vs ``\\frac{1}{2006!}``, ``10^{-30}`` vs ``10^{-31}``; Math-Verify
issue #14). :func:`is_equivalent` therefore re-checks a match of two numbers relatively
(:func:`_numbers_differ`): exactly (to 50 significant digits) when both are exact, within
``FLOAT_REL_TOL`` when one is a decimal.

Answer extraction (:func:`find_answer`) tries, in this order, the fallbacks of the standard
math evaluations: the last ``\\boxed{}`` (:func:`extract_answer`), then the last explicit
"answer is ..." phrase ("The answer is **73**.", "Therefore, the final answer is $5$."), then,
for numeric-answer datasets only (``numeric=True``), the last number in the text.

Every math_verify call is wrapped: a parse failure, an exception or a timeout makes the answer
"not equivalent" (``False``), never an exception. math_verify enforces its timeouts with
``signal.alarm``, which only works in the main thread; outside the main thread the functions here
run without a timeout instead of failing.
"""

from __future__ import annotations

import functools
import logging
import re
import threading

from math_verify import LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException
from sympy import Basic, Expr, Float, Integer, MatrixBase, Rational, sstr

__all__ = [
    "answer_key",
    "extract_answer",
    "find_answer",
    "grade",
    "is_equivalent",
    "normalize_answer",
    "parse_answer",
]

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5
"""Per-call time limit for math_verify's parse and verify (main thread only)."""

FLOAT_REL_TOL = 1e-5
"""Most relative difference of two numbers one of which is a decimal (``0.333333`` matches
``\\frac{1}{3}``)."""

EXACT_REL_TOL = 1e-40
"""Most relative difference of two exact numbers, evaluated to 50 digits (i.e. equal)."""

_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
_PHRASE_END = re.compile(r"\s*(?:[.;!](?:\s|$)|,\s|$)")

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BOXED_CONFIG = (LatexExtractionConfig(boxed_match_priority=0),)
# One number in 3-digit groups: 1,450,000 / 1{,}000 / 10,\!080 / 11,\! 111 / \$32,\!348.
_SEP = r"(?:,\\!\s*|\{,\}|,|\\,\s*|\\!\s*)"
_THOUSANDS = re.compile(rf"(?:\\\$)?[+-]?\d{{1,3}}(?:{_SEP}\d{{3}})+(?:\.\d+)?")
_THOUSANDS_SEP = re.compile(_SEP)
_DELIMITERS = (("**", "**"), ("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))


def extract_answer(text: str | None) -> str | None:
    """Return the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Braces are matched with nesting (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``) and
    escaped braces ``\\{ \\}`` are not counted. A box nested inside another box belongs to the
    outer one, and a box that is the whole content of the box around it is unwrapped
    (``\\boxed{\\boxed{5}}`` gives ``5``). The brace-less form ``\\boxed 5`` gives the text
    up to the next space or ``$``. A box that is never closed (e.g. a truncated generation) and
    an empty box are ignored, so the last complete, non-empty box wins. Pure string function:
    no math parsing.

    Args:
        text: A model completion (or any string); ``None`` is accepted and gives ``None``.

    Returns:
        The box content with surrounding whitespace stripped, or ``None`` if there is no
        complete non-empty box.

    Raises:
        Nothing.
    """
    if not text:
        return None
    result: str | None = None
    pos = 0
    n = len(text)
    while True:
        match = _BOX_CMD.search(text, pos)
        if match is None:
            return result
        i = match.end()
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == "{":
            content, end = _balanced_group(text, i)
            if content is None:  # never closed: look for (inner) boxes after the brace
                pos = i + 1
                continue
            pos = end
        else:
            if i == match.end():  # "\boxedx" is not a box; "\boxed x" is
                pos = i
                continue
            j = i
            while j < n and not text[j].isspace() and text[j] != "$":
                j += 1
            content, pos = text[i:j], max(j, i + 1)
        content = _unwrap_boxes(content.strip())
        if content:
            result = content


def find_answer(text: str | None, numeric: bool = False) -> str | None:
    """The final answer of a completion, by the fallbacks of the standard math evaluations.

    In this order: the last complete ``\\boxed{}`` (:func:`extract_answer`); else the answer
    after the last "answer is" phrase ("The answer is **73**." gives ``73``, "the final answer
    is $\\frac{1}{2}$." gives ``\\frac{1}{2}``, "Therefore, the answer is 73." gives ``73``);
    else, with ``numeric`` (datasets whose answers are all numbers: GSM8K, AIME, AMC), the last
    number in the text (``2,125`` and ``-3.5`` included). Pure string function.

    Args:
        text: A model completion; ``None`` gives ``None``.
        numeric: Allow the last-number fallback.

    Returns:
        The answer text, or ``None`` if no rule finds one.

    Raises:
        Nothing.
    """
    if not text:
        return None
    found = extract_answer(text) or _phrase_answer(text)
    if found is None and numeric:
        numbers = _NUMBER.findall(text)
        found = numbers[-1] if numbers else None
    return found


def _phrase_answer(text: str) -> str | None:
    """The answer after the last "answer is" phrase that is followed by one."""
    for match in reversed(list(_ANSWER_IS.finditer(text))):
        rest = text[match.end():].split("\n", 1)[0].strip()
        for left, right in _DELIMITERS:
            end = rest.find(right, len(left)) if rest.startswith(left) else -1
            if end > len(left):
                return normalize_answer(rest[:end + len(right)]) or None
        if rest.startswith("(") or rest.startswith("\\left"):
            answer = rest  # a tuple or interval: up to the sentence end below
        else:
            answer = rest[:_PHRASE_END.search(rest).start()]
        answer = answer.rstrip(".;!").strip()
        if answer:
            return answer
    return None


def _unwrap_boxes(content: str) -> str:
    """``\\boxed{\\boxed{5}}`` -> ``5``: strip boxes that span the whole content."""
    while True:
        match = _BOX_CMD.match(content)
        if match is None or match.end() >= len(content) or content[match.end()] != "{":
            return content
        inner, end = _balanced_group(content, match.end())
        if inner is None or end != len(content):
            return content
        content = inner.strip()


def _balanced_group(text: str, start: int) -> tuple[str | None, int]:
    """Content of the brace group opening at ``text[start] == "{"`` and the index after it."""
    depth = 0
    j = start
    n = len(text)
    while j < n:
        ch = text[j]
        if ch == "\\":
            j += 2  # skip the escaped character (\{, \}, \\)
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : j], j + 1
        j += 1
    return None, n


def normalize_answer(answer: str | None) -> str:
    """Normalise an answer string before parsing (no math parsing involved).

    Steps: strip whitespace; if the string contains a ``\\boxed{}``/``\\fbox{}``, keep the last
    box's content; remove enclosing math delimiters (``$$..$$``, ``\\[..\\]``, ``\\(..\\)``,
    ``$..$``) and enclosing markdown bold (``**73**`` -> ``73``; ``2**3`` is left alone); drop
    thousands separators (``,``, ``{,}``, ``,\\!``, ``\\,``, ``\\!``) only when the whole
    string is a single number written in 3-digit groups (``1,450,000`` -> ``1450000``;
    ``(3, 125)`` and ``1,2`` are unchanged).

    Args:
        answer: The answer text; ``None`` gives ``""``.

    Returns:
        The normalised string (possibly empty).

    Raises:
        Nothing.
    """
    if answer is None:
        return ""
    s = str(answer).strip()
    if "\\boxed" in s or "\\fbox" in s:
        boxed = extract_answer(s)
        if boxed is not None:
            s = boxed
    changed = True
    while changed:
        changed = False
        for left, right in _DELIMITERS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                inner = s[len(left) : len(s) - len(right)].strip()
                if inner and left not in inner:
                    s = inner
                    changed = True
                    break
    if _THOUSANDS.fullmatch(s):
        s = _THOUSANDS_SEP.sub("", s)
    return s


def _timeout() -> int | None:
    """math_verify's signal-based timeout only works in the main thread."""
    return TIMEOUT_SECONDS if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=8192)
def _parse_normalized(s: str) -> tuple:
    """math_verify parse of an already normalised answer, as a tuple (cached, never raises)."""
    if not s:
        return ()
    try:
        parsed = parse(
            "\\boxed{" + s + "}",
            extraction_config=_BOXED_CONFIG,
            fallback_mode="first_match",
            parsing_timeout=_timeout(),
        )
    except (Exception, TimeoutException):  # TimeoutException is a BaseException
        logger.debug("math_verify.parse failed on %r", s, exc_info=True)
        parsed = []
    if not any(isinstance(x, (Basic, MatrixBase)) for x in parsed):
        # Not LaTeX math: fall back to math_verify's default extractors (LaTeX + plain numbers).
        try:
            fallback = parse(s, parsing_timeout=_timeout())
        except (Exception, TimeoutException):
            fallback = []
        if any(isinstance(x, (Basic, MatrixBase)) for x in fallback):
            parsed = fallback
    if not parsed:
        parsed = [s]  # let verify at least compare the normalised strings
    return tuple(parsed)


def parse_answer(answer: str | None) -> list:
    """Parse a gold or predicted answer string into math_verify's representation.

    The string is normalised with :func:`normalize_answer` and then parsed as the content of a
    ``\\boxed{...}`` by ``math_verify.parse`` (LaTeX extraction, ``fallback_mode="first_match"``);
    if that yields no sympy object, math_verify's default extractors are tried on the plain text.
    Results are cached per normalised string.

    Args:
        answer: The answer text, e.g. ``"2,125"``, ``"27.0"``, ``"\\frac{1}{2}"``,
            ``"(3, \\frac{2\\pi}{3})"``, ``"\\text{13}"``, ``"**73**"``; ``None`` gives ``[]``.

    Returns:
        A new list as returned by ``math_verify.parse``: usually ``[sympy_object, normalised
        string]``; ``[string]`` when nothing parses; ``[]`` for an empty answer. Pass it to
        ``math_verify.verify`` (gold first).

    Raises:
        Nothing: parse errors and timeouts give a string-only or empty list.
    """
    return list(_parse_normalized(normalize_answer(answer)))


def is_equivalent(pred: str | None, gold: str) -> bool:
    """Whether the predicted answer is mathematically equivalent to the gold answer.

    Both are parsed with :func:`parse_answer` and compared with
    ``math_verify.verify(gold, pred)`` (verify is asymmetric; the gold goes first). Identical
    normalised strings are equivalent without calling math_verify.

    Args:
        pred: The predicted answer (e.g. from :func:`extract_answer`); ``None`` gives ``False``.
        gold: The reference answer.

    Returns:
        ``True`` if equivalent; ``False`` otherwise, including empty answers, parse failures,
        math_verify errors and timeouts.

    Raises:
        Nothing.
    """
    if pred is None or gold is None:
        return False
    p = normalize_answer(pred)
    g = normalize_answer(gold)
    if not p or not g:
        return False
    if p == g:
        return True
    gold_parsed = _parse_normalized(g)
    pred_parsed = _parse_normalized(p)
    if not gold_parsed or not pred_parsed:
        return False
    try:
        same = bool(verify(list(gold_parsed), list(pred_parsed), timeout_seconds=_timeout()))
    except (Exception, TimeoutException):
        logger.debug("math_verify.verify failed on %r vs %r", g, p, exc_info=True)
        return False
    return same and not _numbers_differ(gold_parsed[0], pred_parsed[0])


def _numbers_differ(gold, pred) -> bool:
    """Whether two parsed answers are numbers that differ relatively: by more than
    ``EXACT_REL_TOL`` when both are exact, ``FLOAT_REL_TOL`` when one has a decimal. False for
    anything that is not two numbers, or cannot be evaluated."""
    if not all(isinstance(x, Expr) and x.is_number for x in (gold, pred)):
        return False
    tol = FLOAT_REL_TOL if gold.has(Float) or pred.has(Float) else EXACT_REL_TOL
    try:
        g, p = (x.evalf(50) for x in (gold, pred))
        diff, scale = abs((g - p).evalf(50)), max(abs(g), abs(p))
        if not (diff.is_number and scale.is_number):
            return False
        return bool(diff > tol * scale)
    except Exception:  # noqa: BLE001 - math_verify's verdict stands
        logger.debug("relative check failed on %r vs %r", gold, pred, exc_info=True)
        return False


def grade(completion_text: str | None, gold: str, numeric: bool = False) -> bool:
    """Grade a completion: is its final answer (:func:`find_answer`) equivalent to ``gold``?

    Args:
        completion_text: The full model output.
        gold: The reference answer.
        numeric: The dataset's answers are all numbers (allows the last-number fallback).

    Returns:
        ``is_equivalent(find_answer(completion_text, numeric), gold)``; ``False`` when no
        answer is found.

    Raises:
        Nothing.
    """
    return is_equivalent(find_answer(completion_text, numeric), gold)


def answer_key(pred: str | None) -> str | None:
    """A canonical string for an answer, used as a fast path when grouping answers for voting.

    The key is the sympy string of the first parsed object, with numbers canonicalised
    (``27.0`` -> ``"27"``, ``0.5`` and ``\\frac{1}{2}`` -> ``"1/2"``, ``2,125`` -> ``"2125"``);
    when nothing parses it is the normalised text. Equal keys imply equivalent answers, but
    equivalent answers may have different keys (``0.333333`` vs ``\\frac{1}{3}``), so
    :mod:`fasttts.eval.voting` groups by comparing each answer with :func:`is_equivalent`
    against the existing group representatives and uses keys only to skip that comparison.

    Args:
        pred: An answer string; ``None`` gives ``None``.

    Returns:
        The key, or ``None`` for ``None`` or an answer that is empty after normalisation.

    Raises:
        Nothing.
    """
    if pred is None:
        return None
    s = normalize_answer(pred)
    if not s:
        return None
    for obj in _parse_normalized(s):
        if isinstance(obj, (Basic, MatrixBase)):
            try:
                return _canonical(obj)
            except Exception:
                break
    return s


def _canonical(obj: Basic | MatrixBase) -> str:
    if isinstance(obj, Float):
        if obj.is_finite and obj == int(obj):
            return str(int(obj))
        return sstr(Rational(str(obj)))
    if isinstance(obj, Integer):
        return str(int(obj))
    return sstr(obj)
