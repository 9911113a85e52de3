"""Reverse a string of 5 to 12 lowercase letters: "grpoworks=" -> "skrowoprg<eos>" (6 to 13 tokens).

The task to copy for a task of your own (README, "Your task"): a file of this shape anywhere, then `--task
path/to/it.py` for data/build.py, train_sft.py and train_grpo.py.

Letters are drawn uniformly (no words: nothing to memorise, only the rule); distinct strings only.
"""

from __future__ import annotations

import random
import string

from tinygrpo.data.task import NATIVE_KERNELS, Task, register_task
from tinygrpo.data.tasks._splits import split_rows

SIZES = {"validation": 500, "test": 500, "train": 20_000}  # (train last: see split_rows)
SEED = 2030
LENGTHS = range(5, 13)


def build() -> dict[str, list[dict]]:
    rng = random.Random(SEED)
    words: dict[str, None] = {}
    while len(words) < sum(SIZES.values()):
        words["".join(rng.choices(string.ascii_lowercase, k=rng.choice(LENGTHS)))] = None
    rows = [{"prompt": f"{w}=", "answer": w[::-1], "id": i} for i, w in enumerate(words)]
    return split_rows(rows, SIZES)


def kinds(rows: dict[str, list]) -> dict[str, list[bool]]:
    """Short (5 to 8 letters) or long (9 to 12)."""
    return {
        "short": [len(a) <= 8 for a in rows["answer"]],
        "long": [len(a) > 8 for a in rows["answer"]],
    }


TASK = register_task(
    Task(
        name="reverse",
        summary="5 to 12 random letters, reversed",
        build=build,
        chars=string.ascii_lowercase + "=",
        config="configs/reverse.yaml",
        correct="exact_match",
        reference={
            **NATIVE_KERNELS,
            "output_dir": "checkpoints/reverse",
            "train_size": 0,
            "dataset_test_split": "validation",
            "n_layer": 2,
            "n_embd": 64,
            "n_head": 4,
            "n_positions": 32,
            "max_steps": 400,  # an imperfect reference: ~46 % of validation (1000 steps: 96 %)
            "learning_rate": 3e-3,
        },
        kinds=kinds,
    )
)
