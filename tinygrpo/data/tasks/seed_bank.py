"""The seed demo's 36 questions, a, b in 0..5 (id = a * 6 + b, in the demo's order): the tabular oracle's bank.

One split, `train`, which is also the held-out set (a table can do no better than its own 36 questions). GRPO starts
from addition's reference; the task trains none of its own.
"""

from __future__ import annotations

from tiny_lm.tokenization_tiny_lm import DEFAULT_CHARS
from tinygrpo.data.task import Task, register_task
from tinygrpo.data.tasks.addition import make_row, row_kinds


def build_seed_bank() -> dict[str, list[dict]]:
    """The 36 questions of the seed demo, in its order (q = a * 6 + b)."""
    return {"train": [make_row(a, b, a * 6 + b) for a in range(6) for b in range(6)]}


TASK = register_task(
    Task(
        name="seed_bank",
        summary="the seed demo's 36 sums a+b with a, b in 0..5",
        build=build_seed_bank,
        chars=DEFAULT_CHARS,
        config="configs/seed_bank.yaml",
        correct="accuracy",
        kinds=row_kinds,
        reference=None,  # configs/seed_bank.yaml starts from addition's reference, checkpoints/reference
    )
)
