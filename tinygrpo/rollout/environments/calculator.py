"""A calculator: exact integer + - * on operands below a million, called as `<12*7=` and answered `84>`.

- `calculator`: `add`, `subtract`, `multiply`, any operands in range;
- `calculator_one_digit`: `multiply` only, and only by a one-digit number, so that a product of two 2-digit numbers
  takes several calls and a sum (the tool-use experiment's harder variant: credit assigned across calls).

An operand out of range, a second operand of more than one digit for the one-digit tool, or a call the syntax does not
read is answered `?>` (tinygrpo/rollout/environment.py), never raised.
"""

from __future__ import annotations

import re

from tinygrpo.rollout.environment import Environment, register_environment

LIMIT = 10**6  # operands must be below it: a bounded tool, as a real one is
_CALL = re.compile(r"(\d{1,7})([+\-*])(\d{1,7})")
_NAMES = {"+": "add", "-": "subtract", "*": "multiply"}


def _check(*xs: int) -> None:
    if any(not 0 <= x < LIMIT for x in xs):
        raise ValueError(f"operands must be in [0, {LIMIT})")


def add(a: int, b: int) -> int:
    """Add two integers exactly.

    Args:
        a: The first term, in [0, 10^6).
        b: The second term, in [0, 10^6).
    """
    _check(a, b)
    return a + b


def subtract(a: int, b: int) -> int:
    """Subtract one integer from another exactly.

    Args:
        a: The number to subtract from, in [0, 10^6).
        b: The number subtracted, in [0, 10^6).
    """
    _check(a, b)
    return a - b


def multiply(a: int, b: int) -> int:
    """Multiply two integers exactly.

    Args:
        a: The first factor, in [0, 10^6).
        b: The second factor, in [0, 10^6).
    """
    _check(a, b)
    return a * b


def multiply_by_digit(a: int, d: int) -> int:
    """Multiply an integer by a one-digit number exactly.

    Args:
        a: The integer, in [0, 10^6).
        d: The digit, in [0, 9].
    """
    _check(a)
    if not 0 <= d <= 9:
        raise ValueError("the second factor must be one digit")
    return a * d


def parse(text: str) -> tuple[str, list[str]]:
    """`12*7` -> ("multiply", ["12", "7"]); ValueError for anything else."""
    m = _CALL.fullmatch(text)
    if m is None:
        raise ValueError(f"not a call: {text!r}")
    return _NAMES[m.group(2)], [m.group(1), m.group(3)]


def parse_one_digit(text: str) -> tuple[str, list[str]]:
    """`12*7` -> ("multiply_by_digit", ["12", "7"]); only products."""
    name, args = parse(text)
    return ("multiply_by_digit" if name == "multiply" else name), args


CALCULATOR = register_environment(
    Environment(
        name="calculator",
        summary="exact integer + - * on operands below a million: <12*7= is answered 84>",
        tools=(add, subtract, multiply),
        parse=parse,
    )
)
ONE_DIGIT = register_environment(
    Environment(
        name="calculator_one_digit",
        summary="a product by one digit only: <12*7= is answered 84>, <12*34= is answered ?>",
        tools=(multiply_by_digit,),
        parse=parse_one_digit,
        max_calls=6,
    )
)
