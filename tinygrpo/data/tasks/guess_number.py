"""Guess the number: a hidden integer in [0, 64); each turn the policy writes a guess and the environment answers
whether the number is smaller, larger or found, "32?<16?>24?=" (tinygrpo/rollout/environments/guess_number.py
answers: `<` the number is smaller, `>` larger, `=` found, and the episode ends).

The task of the multi-turn experiment (docs/turns.md). Binary search is optimal, and its expected number of turns is
known exactly (`optimal_expected_turns`): the limit the learned policy is measured against. The reference imitates a
weaker strategy, a uniform guess inside the interval the replies so far leave (`weak_episode`), so that there is a
strategy for RL to find. Every row is an episode: a hidden target and the weak strategy's episode on it (drawn again
until it finds the number within the cap, so that every gold transcript is right). The prompt is the same on every
row ("64:"): the policy cannot see the target, so the splits differ in their episodes (the targets they hide and the
weak episodes), not in their prompts; every split covers the 64 targets (a policy trained on a subset of them would
face another prior than the uniform one under which binary search is optimal).

Its rewards, `guess_found` (the verifier) and `guess_turns` (the environment's own), and how a transcript is read are in
rewards/guess_number.py, found by name as every reward is.
"""

from __future__ import annotations

import random
from functools import cache

from rewards.guess_number import (  # noqa: F401  (the task's rewards and transcripts)
    MAX_TURNS,
    N,
    found_in,
    guess_found,
    guess_turns,
    hidden,
    plain,
    reply,
    turns_in,
    turns_of,
)
from tinygrpo.data.task import NATIVE_KERNELS, Task, register_task
from tinygrpo.data.tasks._splits import split_rows

PROMPT = f"{N}:"
SIZES = {"validation": 500, "test": 500, "train": 20_000}  # (train last: see split_rows)
SEED = 2040
CHARS = (
    "0123456789:?<>=!."  # the prompt, the guesses, `?` ending one, the replies, the error, the blind reply
)


def weak_episode(target: int, rng: random.Random) -> str:
    """The weak strategy's episode: each guess uniform in the interval the replies so far leave, until found."""
    lo, hi, text = 0, N - 1, ""
    while True:
        g = rng.randint(lo, hi)
        r = reply(target, g)
        text += f"{g}?{r}"
        if r == "=":
            return text
        lo, hi = (lo, g - 1) if r == "<" else (g + 1, hi)


def build() -> dict[str, list[dict]]:
    rng = random.Random(SEED)
    rows = []
    for i in range(sum(SIZES.values())):
        target = rng.randrange(N)
        while (episode := weak_episode(target, rng)).count("?") > MAX_TURNS:
            pass
        rows.append({"prompt": PROMPT, "answer": episode, "target": target, "id": i})
    return split_rows(rows, SIZES)


@cache
def optimal_expected_turns(n: int = N) -> float:
    """Binary search's expected turns on a uniform hidden number in [0, n), exactly: a guess splits an interval of
    m numbers into the halves below and above it, and the best split is the middle (a comparison tree of minimal
    total depth): E(m) = 1 + (E(lo) lo + E(hi) hi) / m, minimised over the guess."""
    best = [0.0] * (n + 1)
    for m in range(1, n + 1):
        best[m] = 1 + min((best[g] * g + best[m - 1 - g] * (m - 1 - g)) / m for g in range(m))
    return best[n]


TASK = register_task(
    Task(
        name="guess_number",
        summary="find a hidden number in [0, 64): guess, read <, > or =, guess again (an environment over turns)",
        build=build,
        chars=CHARS,
        config="configs/guess_number.yaml",
        correct="guess_found",
        rewards=("guess_turns",),
        # The machine's own kernels, not the portable ones: they train this reference 3x faster here (0.18 s a step
        # against 0.55, one thread), which the multi-turn study's 30 minutes on 2 cores need (it trains the reference
        # and a control of twice its steps); its results file records the CPU.
        reference={
            **NATIVE_KERNELS,
            "output_dir": "checkpoints/guess_number",
            "environment": "guess_number",
            "allow_overlapping_splits": True,
            "train_size": 0,
            "dataset_test_split": "validation",
            "n_layer": 3,
            "n_embd": 96,
            "n_head": 4,
            "n_positions": 56,
            "max_steps": 1500,
            "learning_rate": 3e-3,
            "torch_num_threads": 1,
        },
    )
)
