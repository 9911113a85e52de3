"""Chain sums: 2 to 6 numbers of 1 to 4 digits joined by + and -, "7536-2167+2813+1345-3856=", in two formats.

The problems are drawn as reasoning-gym's `chain_sum` draws them at its default difficulty: a number of terms
uniform in 2..6, one number of digits for all of a problem's terms uniform in 1..4 (one digit: 0 to 9; d digits:
10**(d-1) to 10**d - 1), each operator + or - with even odds. The answer may be negative. Each term is written
zero-padded to 4 digits and the expression filled with spaces to the longest one's width before the '=':
"0016-0076+0024               =". A problem's k-th term, and its completion, then always sit at the same places
(what made long addition learnable, docs/tasks.md; with each prompt as long as its expression, the worked reference
of the same budget did not learn to find a term's units: docs/tasks.md).

- `chain_sum`: the answer alone, "5671<eos>": the control;
- `chain_sum_worked`: a running total after each term, then the answer (arXiv 2410.15787: multi-operand sums learn
  with a running-total scratchpad; Lee et al. 2023, arXiv 2307.03381: least significant digit first). Each total is
  its sign, then its 5 digits units first: "+96350,+28180,+72590,+17650=5671<eos>" is 5369, 8182, 9527, 5671. Every
  digit of a total then needs the digit of the total before it and of the next term at a fixed offset, and the
  borrow or carry of the digit just written; only the sign looks ahead (which of the two is larger).

Both are judged by their answer, by `final_answer` (the integer after the last '=', or the whole completion; the
totals are not checked), as multiplication's formats are. `worked_total` writes the same scratchpad for any expression of + and -,
which the reasoning-gym adapter uses for its own chain_sum (tinygrpo/data/tasks/reasoning_gym.py).
"""

from __future__ import annotations

import random

from tinygrpo.data.task import Task, register_task
from tinygrpo.data.tasks import addition_long
from tinygrpo.data.tasks._formats import FORMATS
from tinygrpo.data.tasks._splits import split_rows

__all__ = ["DIRECT", "WORKED", "build", "padded", "running_totals", "worked_total"]

TERMS = range(2, 7)
DIGITS = range(1, 5)
WIDTH = 4  # a term's digits in the prompt
TOTAL_WIDTH = 5  # a running total's digits: |total| <= 6 * 9999 < 10**5
SIZES = {"validation": 500, "test": 500, "train": 20_000}  # (train last: see split_rows)
SEED = 2032
PROMPT_WIDTH = TERMS[-1] * (WIDTH + 1) - 1  # the longest expression: every prompt is as long, '=' included
CHARS = "0123456789+-=, "


def running_totals(terms: list[int], ops: list[str]) -> list[int]:
    """The total after each term from the second on: terms[0] ops[0] terms[1], then ops[1] terms[2], ..."""
    if len(ops) != len(terms) - 1 or set(ops) - {"+", "-"}:
        raise ValueError(f"expected one + or - between each two of {len(terms)} terms, got {ops}")
    totals, total = [], terms[0]
    for op, t in zip(ops, terms[1:], strict=True):
        total = total + t if op == "+" else total - t
        totals.append(total)
    return totals


def worked_total(terms: list[int], ops: list[str]) -> str:
    """The scratchpad: each running total as its sign and its TOTAL_WIDTH digits units first, then '=' and the
    answer written the usual way."""
    totals = running_totals(terms, ops)
    pad = ",".join(("-" if t < 0 else "+") + f"{abs(t):0{TOTAL_WIDTH}d}"[::-1] for t in totals)
    return f"{pad}={totals[-1]}"


def padded(terms: list[int], ops: list[str]) -> str:
    """The prompt: each term zero-padded to WIDTH digits, no spaces, the expression filled with spaces to the
    width of the longest, then '='."""
    expression = "".join(f"{op}{t:0{WIDTH}d}" for op, t in zip(["", *ops], terms, strict=True))
    return expression.ljust(PROMPT_WIDTH) + "="


def _problem(rng: random.Random) -> tuple[tuple[int, ...], tuple[str, ...]]:
    n, d = rng.choice(TERMS), rng.choice(DIGITS)
    low = 0 if d == 1 else 10 ** (d - 1)
    terms = tuple(rng.randint(low, 10**d - 1) for _ in range(n))
    return terms, tuple(rng.choice("+-") for _ in range(n - 1))


def build() -> dict[str, list[dict]]:
    rng = random.Random(SEED)
    problems: dict[tuple, None] = {}  # (insertion-ordered: the draw order decides the splits)
    while len(problems) < sum(SIZES.values()):
        problems[_problem(rng)] = None
    rows = []
    for i, (terms, ops) in enumerate(problems):
        terms, ops = list(terms), list(ops)
        rows.append(
            {
                "prompt": padded(terms, ops),
                "answer": str(running_totals(terms, ops)[-1]),
                "worked": worked_total(terms, ops),
                "terms": terms,
                "ops": "".join(ops),
                "id": i,
            }
        )
    return split_rows(rows, SIZES)


def kinds(rows: dict[str, list]) -> dict[str, list[bool]]:
    """By the number of terms, by their digits, and whether the answer is negative."""
    n_terms = [len(t) for t in rows["terms"]]
    digits = [len(str(max(t))) for t in rows["terms"]]
    out = {f"terms_{n}": [k == n for k in n_terms] for n in TERMS}
    out |= {f"digits_{d}": [k == d for k in digits] for d in DIGITS}
    out["negative"] = [a.startswith("-") for a in rows["answer"]]
    return out


# addition_long's reference (4 layers x 128, lr 1e-3, 4000 steps, one thread): the same model and SFT budget for both
# formats, with room for the prompt (30) and the longest worked completion (5 totals of 7, the answer and <eos>: 42).
REFERENCE = {**addition_long.REFERENCE, "n_positions": 72}


def _task(name: str, summary: str, column: str) -> Task:
    return register_task(
        Task(
            name=name,
            summary=summary,
            build=build,
            chars=CHARS,
            config=f"configs/{name}.yaml",
            correct="final_answer",
            dataset="chain_sum",
            reference={"output_dir": f"checkpoints/{name}", "completion_column": column, **REFERENCE},
            kinds=kinds,
            formats=FORMATS,
        )
    )


DIRECT = _task(
    "chain_sum", "2 to 6 numbers of 1 to 4 digits added and subtracted, the answer alone", "answer"
)
WORKED = _task(
    "chain_sum_worked",
    "the same chain sums, worked: the running total after each term (sign, digits units first), then the answer",
    "worked",
)
