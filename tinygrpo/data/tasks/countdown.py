"""Countdown (TinyZero's task, small): reach the target from 3 or 4 numbers with + - * and parentheses, each number
used exactly once. "95,37,2:116=" -> "(95-37)*2<eos>".

Numbers are drawn from 1..99; the target is the value of a random expression over them (random order, operators
and bracketing), kept when it lies in 1..100 as TinyZero's targets do, so every problem has a solution: that
expression, the `answer` column the reference imitates. The verifiers (`countdown`, and TinyZero's partial credit
`countdown_partial`) accept any right expression, not just that one.
"""

from __future__ import annotations

import random

from rewards.countdown import parse_expression
from tinygrpo.data.task import NATIVE_KERNELS, Task, register_task
from tinygrpo.data.tasks._splits import split_rows

SIZES = {"validation": 500, "test": 500, "train": 20_000}  # (train last: see split_rows)
SEED = 2029
TARGETS = range(1, 101)


def random_expression(numbers: list[int], rng: random.Random) -> str:
    """A random fully-formed expression using each number once: a random binary tree over them in a random order,
    with random operators; parentheses only where precedence needs them."""
    items = [(str(n), "atom") for n in rng.sample(numbers, len(numbers))]
    while len(items) > 1:
        i = rng.randrange(len(items) - 1)
        (left, lk), (right, rk) = items[i], items[i + 1]
        op = rng.choice("+-*")
        if op == "*":
            left = f"({left})" if lk in ("+", "-") else left
            right = f"({right})" if rk in ("+", "-") else right
        elif op == "-":
            right = f"({right})" if rk in ("+", "-") else right
        items[i : i + 2] = [(f"{left}{op}{right}", op)]
    return items[0][0]


def build() -> dict[str, list[dict]]:
    rng = random.Random(SEED)
    rows: list[dict] = []
    seen: set[tuple[tuple[int, ...], int]] = set()
    while len(rows) < sum(SIZES.values()):
        numbers = [rng.randint(1, 99) for _ in range(rng.choice((3, 4)))]
        expression = random_expression(numbers, rng)
        target = parse_expression(expression)[0]
        key = (tuple(sorted(numbers)), target)
        if target not in TARGETS or key in seen:
            continue
        seen.add(key)
        prompt = f"{','.join(map(str, numbers))}:{target}="
        rows.append(
            {"prompt": prompt, "answer": expression, "numbers": numbers, "target": target, "id": len(rows)}
        )
    return split_rows(rows, SIZES)


def kinds(rows: dict[str, list]) -> dict[str, list[bool]]:
    """3 or 4 numbers."""
    return {f"numbers_{k}": [len(n) == k for n in rows["numbers"]] for k in (3, 4)}


TASK = register_task(
    Task(
        name="countdown",
        summary="3 or 4 numbers and a target: an expression with + - * ( ) using each number once",
        build=build,
        chars="0123456789+-*(),:=",
        config="configs/countdown.yaml",
        correct="countdown",
        rewards=("countdown_partial",),
        reference={
            **NATIVE_KERNELS,
            "output_dir": "checkpoints/countdown",
            "train_size": 0,
            "dataset_test_split": "validation",
            "n_layer": 3,
            "n_embd": 96,
            "n_head": 4,
            "n_positions": 48,
            "max_steps": 2000,
            "learning_rate": 3e-3,
        },
        kinds=kinds,
    )
)
