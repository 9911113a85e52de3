"""Long addition: 3- to 6-digit operands, "48213+907=", in three formats over one problem set (and a mix of two).

- `addition_long`: the answer alone, most significant digit first, "49120<eos>" (4 to 8 tokens): the control.
  Every digit may hang on a carry from far to its right, and the digits to add sit at different offsets in every
  prompt: hard for a small model, which is what made its reference 4.8 % right;
- `addition_long_reversed`: the operands zero-padded to 6 digits and the answer least significant digit first,
  "048213+000907=" -> "02194<eos>": each digit needs its column, at a fixed place, and the carry from the digit just
  written (Lee et al. 2023, "Teaching Arithmetic to Small Transformers", arXiv 2307.03381: the reversed format
  learns in a sharp phase transition where the plain one does not). With the operands as written the same reference
  learnt nothing (docs/tasks.md);
- `addition_long_worked`: digit by digit with carries: each column's total (its two digits plus the carry in), right
  to left, then the sum, "10,2,11,9,4=49120<eos>" (3+7=10, carry 1; 1+0+1=2; 2+9=11, carry 1; 8+1=9; 4): a
  scratchpad in the spirit of the paper's, short enough for the same model;
- `addition_long_mixed`: the reasoning experiment's reference imitates the worked sum on one problem in four and the
  answer alone on the others.

Each operand's number of digits is drawn uniformly from 3..6, then its value uniformly among those numbers; distinct
pairs only. The references differ only in the column they imitate (and the reversed one in its padded prompts); the
same model and SFT budget.
"""

from __future__ import annotations

import random

from tinygrpo.data.task import NATIVE_KERNELS, Task, register_task
from tinygrpo.data.tasks._formats import FORMATS
from tinygrpo.data.tasks._splits import split_rows

DIGITS = range(3, 7)
SIZES = {"validation": 500, "test": 500, "train": 20_000}  # (train last: see split_rows)
SEED = 2027


def _operand(rng: random.Random) -> int:
    d = rng.choice(DIGITS)
    return rng.randrange(10 ** (d - 1), 10**d)


def column_totals(a: int, b: int) -> list[int]:
    """Each column's total, units first: its digit of a, its digit of b and the carry in (the tens of the last)."""
    totals, carry = [], 0
    for k in range(max(len(str(a)), len(str(b)))):
        totals.append(a // 10**k % 10 + b // 10**k % 10 + carry)
        carry = totals[-1] // 10
    return totals


def worked(a: int, b: int) -> str:
    """The column totals, right to left, then '=' and the sum (whose digits are the totals' units read backwards,
    after the last total's carry)."""
    return ",".join(map(str, column_totals(a, b))) + f"={a + b}"


def build() -> dict[str, list[dict]]:
    rng = random.Random(SEED)
    pairs: dict[tuple[int, int], None] = {}  # (insertion-ordered: the draw order decides the splits)
    while len(pairs) < sum(SIZES.values()):
        pairs[_operand(rng), _operand(rng)] = None
    rows = [
        {
            "prompt": f"{a}+{b}=",
            "answer": str(a + b),
            "reversed": str(a + b)[::-1],
            "worked": worked(a, b),
            "a": a,
            "b": b,
            "id": i,
        }
        for i, (a, b) in enumerate(pairs)
    ]
    return split_rows(rows, SIZES)


def build_padded() -> dict[str, list[dict]]:
    """The same problems, each operand zero-padded to 6 digits in the prompt, "048213+000907=": every digit at a
    fixed position, so the k-th digit of the answer written backwards sits at a fixed distance from the k-th digits
    of the operands."""
    return {
        split: [{**r, "prompt": f"{r['a']:06d}+{r['b']:06d}="} for r in rows]
        for split, rows in build().items()
    }


def kinds(rows: dict[str, list]) -> dict[str, list[bool]]:
    """By the longer operand's digits (3 to 6), and whether the sum has more digits than either operand."""
    longest = [max(len(str(a)), len(str(b))) for a, b in zip(rows["a"], rows["b"], strict=True)]
    out = {f"digits_{d}": [n == d for n in longest] for d in DIGITS}
    out["sum_longer"] = [len(s) > n for s, n in zip(rows["answer"], longest, strict=True)]
    return out


# 3 layers x 96 at lr 3e-3 for 2000 steps learnt the direct answers' length and first digit only (loss 1.6, 0.0 % of
# validation); this one starts to align the digits (loss 0.78, 4.8 %). One thread: its weights are what
# `python train_sft.py --task NAME` gives on any machine. Every format keeps it (n_positions aside: the worked
# completion is longer).
REFERENCE = {
    **NATIVE_KERNELS,
    "train_size": 0,
    "dataset_test_split": "validation",
    "n_layer": 4,
    "n_embd": 128,
    "n_head": 4,
    "n_positions": 24,
    "max_steps": 4000,
    "learning_rate": 1e-3,
    "torch_num_threads": 1,
}


def _task(name: str, summary: str, correct: str, column: str = "answer", chars: str = "", **more) -> Task:
    reference = {"output_dir": f"checkpoints/{name}", "completion_column": column, **REFERENCE}
    reference.update(more.pop("reference", {}))
    padded = more.pop("padded", False)
    return register_task(
        Task(
            name=name,
            summary=summary,
            build=build_padded if padded else build,
            chars="0123456789+=" + chars,
            config=f"configs/{name}.yaml",
            correct=correct,
            dataset="addition_long_padded" if padded else "addition_long",
            reference=reference,
            kinds=kinds,
            **more,
        )
    )


TASK = _task(
    "addition_long", "3- to 6-digit addition, the answer alone", "accuracy", rewards=("digit_match",)
)
REVERSED = _task(
    "addition_long_reversed",
    "the same sums, operands zero-padded to 6 digits, the answer least significant digit first",
    "reversed_answer",
    column="reversed",
    padded=True,
)
WORKED = _task(
    "addition_long_worked",
    "the same sums, worked: each column's total with its carry, right to left, then the sum",
    "final_answer",
    column="worked",
    chars=",",
    reference={"n_positions": 48},
    formats=FORMATS,
)
# The reasoning experiment on a second task (docs/reasoning.md): the direct answer on three problems in four, the
# worked one on the others, nothing in the prompt to say which (multiplication_mixed's share). Does GRPO, rewarded
# for the answer only, move the policy to the format that gets it right?
MIXED = _task(
    "addition_long_mixed",
    "the same sums; the reference saw three direct answers for each worked one",
    "final_answer",
    chars=",",
    reference={"n_positions": 48, "mix_column": "worked", "mix_share": 0.25},
    formats=FORMATS,
)
