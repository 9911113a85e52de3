"""2-digit addition, direct answers: "37+48=" -> "85<eos>". The default experiment's task.

Every a + b with a, b < 100 (10,000 problems). `test` is 500 problems drawn with `random.Random(1234)`, held out
from SFT and from GRPO alike; `train` is the rest. `validation` (500 problems drawn with `random.Random(1235)` from
the `train` problems the default reference was not trained on) and `train_without_validation` (the rest of `train`)
are for studies: every choice is made on validation, the test split only reports.
"""

from __future__ import annotations

import random

import numpy as np

from tiny_lm.tokenization_tiny_lm import DEFAULT_CHARS
from tinygrpo.data.task import Task, register_task

TEST_SIZE = 500
SPLIT_SEED = 1234
MAX_ENUMERATED = 20_000  # above this many pairs, sample instead of enumerating every pair
SFT_SIZE, SFT_SEED = (
    400,
    0,
)  # the default reference's training problems (tinygrpo/sft/train.py's train_size and seed)


def make_row(a: int, b: int, id_: int) -> dict:
    return {"prompt": f"{a}+{b}=", "answer": str(a + b), "a": a, "b": b, "id": id_}


def build_addition(
    digits: int = 2, test_size: int | None = None, seed: int = SPLIT_SEED
) -> dict[str, list[dict]]:
    """All pairs a, b < 10**digits (or a fixed random sample of 20,000 when there are more), split train/test.

    test_size defaults to 500, or a fifth of the problems when there are fewer than 2,500 (1 digit: 20 of 100).
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    n = 10**digits
    if n * n <= MAX_ENUMERATED:
        pairs = [(a, b) for a in range(n) for b in range(n)]
    else:
        rng = random.Random(seed + digits)
        pairs = sorted({(rng.randrange(n), rng.randrange(n)) for _ in range(MAX_ENUMERATED)})
    if test_size is None:
        test_size = min(TEST_SIZE, len(pairs) // 5)
    if not 0 < test_size < len(pairs):
        raise ValueError(f"test_size must be in 1..{len(pairs) - 1}, got {test_size}")
    rows = [make_row(a, b, i) for i, (a, b) in enumerate(pairs)]
    test_ids = set(random.Random(seed).sample(range(len(rows)), test_size))
    train = [r for r in rows if r["id"] not in test_ids]
    # A validation split carved from train, for every choice a study makes (the test split is for reporting), out of
    # the problems the default SFT reference did not see (its sample of train, as `datasets` shuffles with seed 0),
    # so that validation is as new to the reference as test is.
    sft = set(np.random.default_rng(SFT_SEED).permutation(len(train))[:SFT_SIZE].tolist())
    unseen = [i for i in range(len(train)) if i not in sft]
    val_ids = {
        train[i]["id"] for i in random.Random(seed + 1).sample(unseen, min(test_size, len(unseen) // 2))
    }
    return {
        "train": train,
        "test": [r for r in rows if r["id"] in test_ids],
        "validation": [r for r in train if r["id"] in val_ids],
        "train_without_validation": [r for r in train if r["id"] not in val_ids],
    }


# The kinds of a+b problem that accuracy is broken down by (a problem may be of several kinds, or of none).
PROBLEM_KINDS = ("one_digit_operand", "carry", "sum_ge_100")


def problem_kinds(a: list[int], b: list[int]) -> dict[str, list[bool]]:
    """For each kind of PROBLEM_KINDS, whether each problem a[i] + b[i] is of that kind: an operand below 10, a carry
    out of the units, a sum of three digits or more."""
    return {
        "one_digit_operand": [x < 10 or y < 10 for x, y in zip(a, b, strict=True)],
        "carry": [x % 10 + y % 10 >= 10 for x, y in zip(a, b, strict=True)],
        "sum_ge_100": [x + y >= 100 for x, y in zip(a, b, strict=True)],
    }


def row_kinds(rows: dict[str, list]) -> dict[str, list[bool]]:
    return problem_kinds(rows["a"], rows["b"])


TASK = register_task(
    Task(
        name="addition",
        summary="2-digit addition, the answer alone",
        build=build_addition,
        chars=DEFAULT_CHARS,
        config="configs/default.yaml",
        correct="accuracy",
        rewards=("accuracy_lenient", "format", "digit_match"),
        # SFTConfig's own defaults: 400 problems, 1000 steps, a deliberately imperfect reference (docs/default.md).
        reference={"dataset_name": "addition", "chars": DEFAULT_CHARS, "output_dir": "checkpoints/reference"},
        kinds=row_kinds,
    )
)
