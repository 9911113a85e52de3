"""Countdown's verifiers (TinyZero's task): reach the target with + - * and parentheses, using each number once.

The expression is parsed here, never `eval`'d: integers, `+ - *`, parentheses, nothing else (no unary minus, no
division, no spaces, no leading zeros), at most 64 characters and 16 levels of parentheses. A number must be one of
the given numbers, each used exactly once (TinyZero's rule: all of them, no repeats). Any completion gets a score and
none raises: a malformed one, one that divides or uses a number twice scores 0.0 (or the partial credit below).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ._constants import EOS
from .registry import register_reward

MAX_CHARS = 64
MAX_DEPTH = 16
_TOKEN = re.compile(r"0|[1-9][0-9]*|[-+*()]", re.ASCII)
PARTIAL_CREDIT = 0.1  # TinyZero's format score: a well-formed expression that is wrong


class _Malformed(Exception):
    pass


def parse_expression(text: str) -> tuple[int, list[int]] | None:
    """(value, the integers it uses in order) of an expression over integers with + - * and parentheses; None if
    it is not one. Precedence: * before + and -, left to right."""
    if not text or len(text) > MAX_CHARS:
        return None
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            return None
        tokens.append(m.group())
        pos = m.end()
    used: list[int] = []
    i = 0

    def peek() -> str | None:
        return tokens[i] if i < len(tokens) else None

    def expr(depth: int) -> int:
        nonlocal i
        value = term(depth)
        while peek() in ("+", "-"):
            op = tokens[i]
            i += 1
            rhs = term(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(depth: int) -> int:
        nonlocal i
        value = factor(depth)
        while peek() == "*":
            i += 1
            value *= factor(depth)
        return value

    def factor(depth: int) -> int:
        nonlocal i
        tok = peek()
        if tok is None:
            raise _Malformed
        if tok == "(":
            if depth >= MAX_DEPTH:
                raise _Malformed
            i += 1
            value = expr(depth + 1)
            if peek() != ")":
                raise _Malformed
            i += 1
            return value
        if tok.isdigit():
            i += 1
            used.append(int(tok))
            return int(tok)
        raise _Malformed

    try:
        value = expr(0)
    except _Malformed:
        return None
    return (value, used) if i == len(tokens) else None


def _score(completion: Any, numbers: Any, target: Any, eos: str) -> tuple[bool, bool]:
    """(well formed, right) for one completion: an expression then <eos>; right if it uses each number once and
    equals the target."""
    if not isinstance(completion, str) or not completion.endswith(eos):
        return False, False
    parsed = parse_expression(completion[: -len(eos)])
    if parsed is None:
        return False, False
    value, used = parsed
    if not isinstance(numbers, list | tuple) or isinstance(target, bool) or not isinstance(target, int):
        raise TypeError(
            f"countdown needs a list of numbers and an integer target, got {numbers!r}, {target!r}"
        )
    return True, value == target and Counter(used) == Counter(numbers)


@register_reward("countdown")
def countdown(
    completions: Sequence[str],
    numbers: Sequence[Sequence[int]],
    target: Sequence[int],
    eos: str = EOS,
    **kwargs: Any,
) -> list[float]:
    """1.0 iff the completion is an expression over the given numbers, each used exactly once, with + - * and
    parentheses, equal to the target, then <eos>; else 0.0."""
    return [float(_score(c, n, t, eos)[1]) for c, n, t in zip(completions, numbers, target, strict=True)]


@register_reward("countdown_partial")
def countdown_partial(
    completions: Sequence[str],
    numbers: Sequence[Sequence[int]],
    target: Sequence[int],
    eos: str = EOS,
    **kwargs: Any,
) -> list[float]:
    """TinyZero's score: 1.0 if right (as `countdown`), 0.1 for a well-formed expression that is wrong (another
    value, or numbers not used exactly once), 0.0 for anything else."""
    scores = []
    for c, n, t in zip(completions, numbers, target, strict=True):
        formed, right = _score(c, n, t, eos)
        scores.append(1.0 if right else PARTIAL_CREDIT if formed else 0.0)
    return scores
