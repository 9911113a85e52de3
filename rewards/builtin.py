"""Built-in verifiable rewards for ``a+b=c`` completions such as ``"85<eos>"``.

All patterns are ASCII-only (``[0-9]``, ``re.ASCII``) and must match the *whole*
completion (``re.fullmatch``, so a trailing newline does not sneak past ``$``).
``<eos>`` below stands for the ``eos`` keyword the trainer passes (default :data:`EOS`).
Gold answers may be ``str`` (``"85"``, surrounding whitespace ignored) or ``int``;
a gold answer of ``None`` makes the reward return ``None`` (not applicable) for that row.
Every reward accepts ``**kwargs`` so it also runs unchanged under TRL.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ._constants import EOS
from .registry import register_reward

_INT_RE = re.compile(r"([+-]?)([0-9]+)", re.ASCII)
# An integer as it is written: no leading zeros, no '+', '-' only before a non-zero one ("-0" is 0 written wrong).
_STRICT_INT = "(-?[1-9][0-9]*|0)"


@lru_cache(maxsize=64)
def _pattern(body: str, eos: str) -> re.Pattern[str]:
    return re.compile(body + re.escape(eos), re.ASCII)


def _canonical(sign: str, digits: str) -> tuple[bool, str]:
    """(negative, digits without leading zeros): equal iff the integers are equal, for any length."""
    digits = digits.lstrip("0") or "0"
    return (sign == "-" and digits != "0", digits)


def _gold(answer: Any) -> tuple[bool, str] | None:
    """Canonical form of a gold answer (str or int); None stays None."""
    if answer is None:
        return None
    if type(answer) in (str, int):  # hashable and common: parsed once per distinct answer
        return _gold_cached(answer)
    return _parse_gold(answer)


@lru_cache(maxsize=1 << 16)
def _gold_cached(answer: str | int) -> tuple[bool, str]:
    return _parse_gold(answer)


def _parse_gold(answer: Any) -> tuple[bool, str]:
    if isinstance(answer, numbers.Integral) and not isinstance(answer, bool):
        text = str(int(answer))
    elif isinstance(answer, str):
        text = answer.strip()
    else:
        raise TypeError(f"gold answer must be str or int, got {type(answer).__name__} {answer!r}")
    m = _INT_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"gold answer {answer!r} is not an integer")
    return _canonical(m.group(1), m.group(2))


def _text(completion: Any) -> str:
    if not isinstance(completion, str):
        raise TypeError(f"expected a plain-text completion (str), got {type(completion).__name__}")
    return completion


# What a verifier said of a (pattern, completion, gold) it has seen: the sampled completions of a prompt repeat within
# a group, across a step's rounds and across steps, and a lookup costs about a fifth of a match and a parse. Bounded
# (cleared when full), and exact: the score is a function of the key (str completion, str or int gold, the pattern).
_SCORES: dict[tuple[re.Pattern[str] | None, str, str | int], float] = {}
_SCORES_MAX = 1 << 16


def _accuracy(
    completions: Sequence[str], answer: Sequence[Any], whole: re.Pattern[str] | None
) -> list[float | None]:
    """1.0 where the integer read from the completion equals the gold: group 1 of `whole` matching the whole
    completion (an integer as written: see _STRICT_INT), or, with `whole` None, the first signed integer anywhere."""
    scores: list[float | None] = []
    seen = _SCORES
    for completion, gold_raw in zip(completions, answer, strict=True):
        key = (whole, completion, gold_raw)
        cacheable = type(completion) is str and type(gold_raw) in (str, int)
        hit = seen.get(key) if cacheable else None
        if hit is not None:
            scores.append(hit)
            continue
        gold = _gold(gold_raw)
        if gold is None:
            scores.append(None)
            continue
        score = _score(_text(completion), gold, whole)
        if cacheable:
            if len(seen) >= _SCORES_MAX:
                seen.clear()
            seen[key] = score
        scores.append(score)
    return scores


def _score(text: str, gold: tuple[bool, str], whole: re.Pattern[str] | None) -> float:
    if whole is not None:
        m = whole.fullmatch(text)
        pred = _canonical(*_INT_RE.fullmatch(m.group(1)).groups()) if m else None
    else:
        m = _INT_RE.search(text)
        pred = _canonical(m.group(1), m.group(2)) if m else None
    return 1.0 if pred == gold else 0.0


@register_reward("accuracy")
def accuracy(
    completions: Sequence[str], answer: Sequence[Any], eos: str = EOS, **kwargs: Any
) -> list[float | None]:
    """Strict verifier: 1.0 iff the completion is exactly ^(-?[1-9][0-9]*|0)<eos>$ and equals the gold integer.

    No leading zeros ("085<eos>"), plus signs ("+85"), "-0", spaces, non-ASCII digits, text
    after the number or after <eos>, and no truncated output (missing <eos>): all 0.0.
    Integers of any length compare exactly.
    """
    return _accuracy(completions, answer, _pattern(_STRICT_INT, eos))


@register_reward("accuracy_lenient")
def accuracy_lenient(
    completions: Sequence[str], answer: Sequence[Any], eos: str = EOS, **kwargs: Any
) -> list[float | None]:
    """Lenient verifier: 1.0 iff the first integer [+-]?[0-9]+ anywhere in the completion equals the gold.

    Leading zeros, a sign ("+85", "-0" == 0), text around the number and a missing <eos> are
    tolerated; only ASCII digits count; no integer at all -> 0.0.
    """
    return _accuracy(completions, answer, None)


@register_reward("final_answer")
def final_answer(
    completions: Sequence[str], answer: Sequence[Any], eos: str = EOS, **kwargs: Any
) -> list[float | None]:
    """Worked or direct: 1.0 iff the completion is ^(work=)?(-?[1-9][0-9]*|0)<eos>$ and the integer after its last
    '=' equals the gold; the work before it is not checked.

    So "296+1480=1776<eos>" and "1776<eos>" both score 1.0 for 37*48; the integer itself is read as strictly as
    ``accuracy`` reads it (no leading zeros, '+' or "-0", spaces; a missing <eos> or text after it scores 0.0).
    """
    return _accuracy(completions, answer, _worked_pattern(eos))


@register_reward("tool_answer")
def tool_answer(
    completions: Sequence[str], answer: Sequence[Any], eos: str = EOS, **kwargs: Any
) -> list[float | None]:
    """With tool calls: 1.0 iff the completion is ^(<call>)*(-?[1-9][0-9]*|0)<eos>$, answered calls (each a span
    from '<' to '>', the environment's reply included: tinygrpo/rollout/environments/calculator.py) and then the integer,
    and the integer equals the gold; the calls are not checked.

    So "<37*48=1776>1776<eos>" and "1776<eos>" both score 1.0 for 37*48, and so does
    "<37*8=296><37*40=1480><296+1480=1776>1776<eos>"; a call left open ("<37*48=1776<eos>"), text between the calls
    or an integer read as ``accuracy`` refuses it score 0.0.
    """
    return _accuracy(completions, answer, _pattern("(?:<[^<>]*>)*" + _STRICT_INT, eos))


@register_reward("reversed_answer")
def reversed_answer(
    completions: Sequence[str], answer: Sequence[Any], eos: str = EOS, **kwargs: Any
) -> list[float | None]:
    """Least significant digit first: 1.0 iff the completion is ^[0-9]+<eos>$ and its digits read backwards are
    ^(0|[1-9][0-9]*)$ and equal the gold integer (which is written the usual way).

    So "02194<eos>" scores 1.0 for 48213+907 (49120); "021940<eos>" (a leading zero once read backwards), signs,
    spaces, a missing <eos> or text after it score 0.0, as ``accuracy`` reads the usual order.
    """
    written = _pattern("([0-9]+)", eos)

    def backwards(completion: Any) -> str:
        # The digits turned around, then `accuracy`'s own strict rule. Anything else is wrong here whatever
        # `accuracy` would make of it ("-4912<eos>" is an answer in the usual order, not reversed): an empty text.
        m = written.fullmatch(_text(completion))
        return m.group(1)[::-1] + eos if m else ""

    return accuracy([backwards(c) for c in completions], answer, eos)


@lru_cache(maxsize=8)
def _worked_pattern(eos: str) -> re.Pattern[str]:
    # Any work not holding the eos marker, up to its last '=' (greedy), then the strict integer and eos.
    work = f"(?:(?:(?!{re.escape(eos)}).)*=)?"
    return re.compile(work + _STRICT_INT + re.escape(eos), re.ASCII | re.DOTALL)


def make_accuracy(strict: bool = True) -> Any:
    """The strict (``accuracy``) or lenient (``accuracy_lenient``) verifier."""
    return accuracy if strict else accuracy_lenient


@register_reward("format")
def format_reward(completions: Sequence[str], eos: str = EOS, **kwargs: Any) -> list[float]:
    """1.0 iff the completion is ^[0-9]+<eos>$ (ASCII digits then <eos>; leading zeros allowed), else 0.0.

    Ignores correctness; no gold answer needed.
    """
    well_formed = _pattern("[0-9]+", eos)
    return [1.0 if well_formed.fullmatch(_text(c)) else 0.0 for c in completions]


@register_reward("digit_match")
def digit_match(
    completions: Sequence[str], answer: Sequence[Any], eos: str = EOS, **kwargs: Any
) -> list[float | None]:
    """Partial credit: right-aligned digit matches / max(len(pred), len(gold)); needs ^[0-9]+<eos>$.

    Digits are compared units with units, tens with tens, ...; the gold's canonical digits
    are used ("085" -> "85"), the prediction's as written, so "085<eos>" vs 85 scores 2/3.
    Anything not matching ^[0-9]+<eos>$ scores 0.0; exactly right scores 1.0. The gold
    answer must be a non-negative integer.
    """
    well_formed = _pattern("([0-9]+)", eos)
    scores: list[float | None] = []
    for completion, gold_raw in zip(completions, answer, strict=True):
        gold = _gold(gold_raw)
        if gold is None:
            scores.append(None)
            continue
        negative, gold_digits = gold
        if negative:
            raise ValueError(f"digit_match needs a non-negative gold answer, got {gold_raw!r}")
        m = well_formed.fullmatch(_text(completion))
        if m is None:
            scores.append(0.0)
            continue
        pred = m.group(1)
        matches = sum(p == g for p, g in zip(reversed(pred), reversed(gold_digits), strict=False))
        scores.append(matches / max(len(pred), len(gold_digits)))
    return scores


def _check_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def soft_overlong_punishment(
    n: int, max_completion_length: int, soft_punish_cache: int | None = None
) -> float:
    """DAPO's soft overlong punishment (Eq. 13) for a completion of ``n`` tokens.

    With L = max_completion_length and C = soft_punish_cache (default max(1, L // 4)):
    0 if n <= L - C; (L - C - n) / C if L - C < n <= L; -1 if n > L. Requires 1 <= C <= L.
    """
    length = _check_int(max_completion_length, "max_completion_length")
    if length < 1:
        raise ValueError(f"max_completion_length must be >= 1, got {length}")
    cache = (
        max(1, length // 4)
        if soft_punish_cache is None
        else _check_int(soft_punish_cache, "soft_punish_cache")
    )
    if not 1 <= cache <= length:
        raise ValueError(f"soft_punish_cache must be in [1, max_completion_length={length}], got {cache}")
    if n <= length - cache:
        return 0.0
    if n <= length:
        return (length - cache - n) / cache
    return -1.0


class LengthPenalty:
    """Picklable ``length_penalty`` with a fixed cache (and optionally a fixed L, for use under TRL)."""

    __name__ = "length_penalty"

    def __init__(
        self, soft_punish_cache: int | None = None, max_completion_length: int | None = None
    ) -> None:
        self.soft_punish_cache = soft_punish_cache
        self.max_completion_length = max_completion_length
        if max_completion_length is not None:  # fail at construction, not mid-training
            soft_overlong_punishment(0, max_completion_length, soft_punish_cache)

    def __call__(
        self, completion_ids: Sequence[Sequence[int]], max_completion_length: int | None = None, **kwargs: Any
    ) -> list[float]:
        length = (
            self.max_completion_length if self.max_completion_length is not None else max_completion_length
        )
        if length is None:
            raise TypeError(
                "length_penalty needs max_completion_length (trainer keyword or make_length_penalty)"
            )
        return [soft_overlong_punishment(len(ids), length, self.soft_punish_cache) for ids in completion_ids]

    def __repr__(self) -> str:
        return f"LengthPenalty(soft_punish_cache={self.soft_punish_cache}, max_completion_length={self.max_completion_length})"


def make_length_penalty(
    soft_punish_cache: int | None = None, max_completion_length: int | None = None
) -> LengthPenalty:
    """``length_penalty`` with another cache size; pass ``max_completion_length`` to fix L (TRL has no such kwarg)."""
    return LengthPenalty(soft_punish_cache, max_completion_length)


@register_reward("length_penalty")
def length_penalty(
    completion_ids: Sequence[Sequence[int]], max_completion_length: int, **kwargs: Any
) -> list[float]:
    """DAPO soft overlong punishment: 0 if n <= L-C, (L-C-n)/C if L-C < n <= L, -1 beyond; C = max(1, L // 4).

    n = len(completion_ids[i]) (the <eos> token counts), L = the trainer's max_completion_length.
    Use make_length_penalty(soft_punish_cache) for another C.
    """
    return [soft_overlong_punishment(len(ids), max_completion_length) for ids in completion_ids]
