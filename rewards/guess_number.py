"""Guess the number's rewards (the task: tinygrpo/data/tasks/guess_number.py; the environment:
tinygrpo/rollout/environments/guess_number.py), and how its transcripts are read.

A transcript is turns, `guess?reply` each: the policy's guess (any text up to `?`, as decoding reads it), then the
environment's reply, `<` (the number is smaller), `>` (larger), `=` (found), `.` (blind: not it) or `!` (not a guess).

- `guess_found` (the verifier): 1.0 iff the transcript finds the hidden number within the cap and ends there;
- `guess_turns` (the GRPO reward, the environment's own, TRL's `environments` keyword): found within the cap, less
  a twelfth per turn used: (13 - turns) / 12, 0 when not found.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._constants import EOS
from .registry import register_reward

N = 64  # the hidden number is in [0, N)
# Turns per episode at most: binary search needs 7 at most; the weak strategy (a guess inside the interval) needs
# 12 or fewer in about 99 % of episodes.
MAX_TURNS = 12
# A turn as decoding reads it: whatever the policy wrote up to `?` (the call, well formed or not), then the reply.
_TURN = re.compile(r"([^?]*)\?([<>=.!])")


def reply(target: int, guess: int) -> str:
    """`=` found, `<` the number is smaller than the guess, `>` larger."""
    return "=" if guess == target else ("<" if target < guess else ">")


def turns_in(completion: str) -> list[tuple[str, str]]:
    """The turns a transcript writes from its start, (the guess's text, the reply) each, up to the cap."""
    out, at = [], 0
    while len(out) < MAX_TURNS and (m := _TURN.match(completion, at)) is not None:
        out.append((m.group(1), m.group(2)))
        at = m.end()
    return out


def turns_of(completion: str) -> tuple[int, bool]:
    """(turns, found): the turns up to the first answered `=` (all of them, up to the cap, when none is), and
    whether one was (the replies trusted: what the policy read)."""
    turns = turns_in(completion)
    hit = next((i for i, (_, r) in enumerate(turns) if r == "="), None)
    return (len(turns), False) if hit is None else (hit + 1, True)


def hidden(target) -> int:
    """A row's `target` as the hidden number: an integer in [0, N) (3.0, as a column of numbers may hold it, is 3);
    ValueError for anything else, 3.5 or 64 or "3" (played as 3 or out of range, the episode would not be the row's)."""
    whole = isinstance(target, int | float) and not isinstance(target, bool) and float(target).is_integer()
    if not (whole and 0 <= target < N):
        raise ValueError(f"target {target!r}: the hidden number is an integer in [0, {N})")
    return int(target)


def plain(text: str) -> bool:
    """An integer written plainly: digits, no leading zero."""
    return text.isdigit() and str(int(text)) == text


def found_in(completion: str, target: int, eos: str = EOS) -> bool:
    """The transcript is whole turns, `guess?reply` each, within the cap, the last one a guess equal to the hidden
    number (the replies not trusted: the guess itself must be it) answered `=`, then <eos> (the environment ends a
    found episode with it: a transcript cut before it is not a finished one)."""
    if not completion.endswith(eos):
        return False
    body = completion[: -len(eos)]
    turns = turns_in(body)
    if not turns or sum(len(g) + 2 for g, _ in turns) != len(body):
        return False
    guess, said = turns[-1]
    return said == "=" and plain(guess) and int(guess) == hidden(target)


@register_reward("guess_found")
def guess_found(completions: Sequence[str], target: Sequence[int], eos: str = EOS, **kwargs) -> list[float]:
    """1.0 iff the episode found the hidden number within the cap and ended (found_in)."""
    return [float(found_in(c, t, eos)) for c, t in zip(completions, target, strict=True)]


@register_reward("guess_turns")
def guess_turns(completions: Sequence[str], environments=None, **kwargs) -> list[float | None]:
    """The environment's own reward (TRL's `environments`): (MAX_TURNS + 1 - turns) / MAX_TURNS when its episode found
    the number, 0 when not; None for an episode whose instance was lost (or a run without the environment)."""
    if environments is None:
        return [None] * len(completions)
    return [None if e is None else (MAX_TURNS + 1 - e.turns) / MAX_TURNS * e.found for e in environments]
