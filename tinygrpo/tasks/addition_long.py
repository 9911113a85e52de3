"""Long addition, direct answers: 3- to 6-digit operands, "48213+907=" -> "49120<eos>" (4 to 8 tokens).

Each operand's number of digits is drawn uniformly from 3..6, then its value uniformly among those numbers; distinct
pairs only. The answer comes most significant digit first, so every digit may hang on a carry from far to its right:
hard for a small model without a scratchpad, which is what makes the reference imperfect.
"""

from __future__ import annotations

import random

from tinygrpo.task import Task, register_task
from tinygrpo.tasks._splits import split_rows

DIGITS = range(3, 7)
SIZES = {"validation": 500, "test": 500, "train": 20_000}  # (train last: see split_rows)
SEED = 2027


def _operand(rng: random.Random) -> int:
    d = rng.choice(DIGITS)
    return rng.randrange(10 ** (d - 1), 10**d)


def build() -> dict[str, list[dict]]:
    rng = random.Random(SEED)
    pairs: dict[tuple[int, int], None] = {}  # (insertion-ordered: the draw order decides the splits)
    while len(pairs) < sum(SIZES.values()):
        pairs[_operand(rng), _operand(rng)] = None
    rows = [
        {"prompt": f"{a}+{b}=", "answer": str(a + b), "a": a, "b": b, "id": i}
        for i, (a, b) in enumerate(pairs)
    ]
    return split_rows(rows, SIZES)


def kinds(rows: dict[str, list]) -> dict[str, list[bool]]:
    """By the longer operand's digits (3 to 6), and whether the sum has more digits than either operand."""
    longest = [max(len(str(a)), len(str(b))) for a, b in zip(rows["a"], rows["b"], strict=True)]
    out = {f"digits_{d}": [n == d for n in longest] for d in DIGITS}
    out["sum_longer"] = [len(s) > n for s, n in zip(rows["answer"], longest, strict=True)]
    return out


TASK = register_task(
    Task(
        name="addition_long",
        summary="3- to 6-digit addition, the answer alone",
        build=build,
        chars="0123456789+=",
        config="configs/addition_long.yaml",
        correct="accuracy",
        rewards=("digit_match",),
        # 3 layers x 96 at lr 3e-3 for 2000 steps learnt the answers' length and first digit only (loss 1.6,
        # 0.0 % of validation); this one starts to align the digits (loss 0.78, 4.8 %). One thread: its weights are
        # what `python train_sft.py --task addition_long` gives on any machine.
        reference={
            "output_dir": "checkpoints/addition_long",
            "train_size": 0,
            "eval_split": "validation",
            "n_layer": 4,
            "n_embd": 128,
            "n_head": 4,
            "n_positions": 24,
            "max_steps": 4000,
            "learning_rate": 1e-3,
            "torch_num_threads": 1,
        },
        kinds=kinds,
    )
)
