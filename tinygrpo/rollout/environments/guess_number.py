"""Guess the number, an environment over turns (TRL's environment_factory): each completion is an episode with a
hidden integer in [0, 64), the dataset row's `target`. The policy writes a guess and `?`; the environment answers
`<` (the number is smaller), `>` (larger) or `=` (found: the episode ends), "32?<16?>24?=", for at most 12 turns.

- `guess_number`: as above (tinygrpo/data/tasks/guess_number.py is its task);
- `guess_number_blind` (the study's control): the same episodes, but a wrong guess is answered `.`: the policy
  guesses blind, told only when it has found the number.

A guess that is not an integer written plainly ("07", "", "3a") is answered `!` and costs its turn.
"""

from __future__ import annotations

from tinygrpo.data.tasks.guess_number import MAX_TURNS, N, hidden, plain, reply
from tinygrpo.rollout.environment import Environment, register_environment


class GuessNumber:
    """One episode: `reset(target=...)`, then a `guess` a turn; `turns`, `found` and `done` are its state."""

    blind = False

    def reset(self, target: int, **row) -> None:
        self.target, self.turns, self.found, self.done = hidden(target), 0, False, False
        self.guesses: list[int] = []

    def guess(self, n: str) -> str:
        """Guess the hidden number.

        Args:
            n: The guess, an integer in [0, 64) written plainly.
        """
        self.turns += 1  # (a malformed guess costs its turn too)
        if not plain(n):
            raise ValueError(f"not a guess: {n!r}")
        self.guesses.append(int(n))
        said = reply(self.target, int(n))
        self.found = self.done = said == "="
        return "." if self.blind and said != "=" else said


class BlindGuess(GuessNumber):
    blind = True


def parse(text: str) -> tuple[str, list[str]]:
    """Every turn is a guess: the text between the last reply and `?`."""
    return "guess", [text]


def _environment(name: str, summary: str, factory: type) -> Environment:
    return register_environment(
        Environment(
            name=name,
            summary=summary,
            tools=(),
            parse=parse,
            factory=factory,
            open="",
            end="?",
            close="",
            error="!",
            max_calls=MAX_TURNS,
            max_reply_chars=1,
        )
    )


GUESS = _environment(
    "guess_number",
    f"a hidden number in [0, {N}): 32? is answered < (smaller), > (larger) or = (found)",
    GuessNumber,
)
BLIND = _environment(
    "guess_number_blind", f"a hidden number in [0, {N}): 32? is answered . (not it) or = (found)", BlindGuess
)
