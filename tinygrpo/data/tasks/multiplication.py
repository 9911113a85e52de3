"""Multiplication, in two formats over one problem set: 2x2- and 3x2-digit products, "37*48=".

- `multiplication`: the answer alone, "1776<eos>";
- `multiplication_scratchpad`: the worked product: each partial product, then their sum, then the answer,
  "37*8=296,37*40=1480,296+1480=1776<eos>" (30 to 40 tokens);
- `multiplication_mixed`: the reasoning experiment's reference (docs/reasoning.md) imitates the worked product on
  one training problem in four and the answer alone on the others.
- `multiplication_tool_digits`: the tool-use experiment's harder variant: a calculator that multiplies by one digit
  only, called twice, then the sum worked, "<37*8=296><37*4=148>296+1480=1776<eos>", on one problem in four.
- `multiplication_tool`: the tool-use experiment's (docs/tools.md): a call to the calculator, its reply and the
  answer, "<37*48=1776>1776<eos>" (tinygrpo/rollout/environments/calculator.py answers the call: the reply "1776>" is the
  environment's, outside every loss), on one training problem in four, the answer alone on the others.

The verifier (`final_answer`) reads the integer after the last '=' only, so either format is judged by its answer;
`completion_format` tells them apart. The tool task's (`tool_answer`) reads the integer after the answered calls. Half the problems are 2x2 digits and half 3x2. The references differ only in
the column they imitate (`answer` or `worked`).
"""

from __future__ import annotations

import random

from tinygrpo.data.task import NATIVE_KERNELS, Formats, Task, register_task
from tinygrpo.data.tasks._formats import FORMATS, completion_format
from tinygrpo.data.tasks._splits import split_rows

__all__ = [
    "TOOL_DIGITS",
    "tool_digits",
    "DIRECT",
    "FORMATS",
    "MIXED",
    "SCRATCHPAD",
    "TOOL",
    "TOOL_FORMATS",
    "completion_format",
    "tool",
    "worked",
]

SIZES = {"validation": 500, "test": 500, "train": 20_000}  # (train last: see split_rows)
SEED = 2028
CHARS = "0123456789*+=,"
TOOL_CHARS = CHARS + "<>?"  # the calculator's call, reply end and error


def worked(a: int, b: int) -> str:
    """The scratchpad of a * b (b of two digits): a times b's units, a times b's tens (shifted), their sum."""
    units, tens = b % 10, b // 10 * 10
    return f"{a}*{units}={a * units},{a}*{tens}={a * tens},{a * units}+{a * tens}={a * b}"


def tool(a: int, b: int) -> str:
    """A call to the calculator, its reply, then the answer: "<37*48=1776>1776"."""
    return f"<{a}*{b}={a * b}>{a * b}"


def tool_digits(a: int, b: int) -> str:
    """Two calls to the one-digit calculator, then their sum worked and the answer: "<37*8=296><37*4=148>296+1480=1776"
    (the second partial product shifted by hand: the tool gives 37*4, the sum needs 37*40)."""
    units, tens = b % 10, b // 10
    return f"<{a}*{units}={a * units}><{a}*{tens}={a * tens}>{a * units}+{a * tens * 10}={a * b}"


def tool_format(completion: str) -> str:
    """ "tool" for a completion that calls the tool first, else completion_format's name."""
    return "tool" if completion.startswith("<") else completion_format(completion)


TOOL_FORMATS = Formats(("direct", "tool", "scratchpad", "other"), tool_format)


def build() -> dict[str, list[dict]]:
    rng = random.Random(SEED)
    pairs: dict[tuple[int, int], None] = {}
    while len(pairs) < sum(SIZES.values()):
        digits = 2 if rng.random() < 0.5 else 3
        pairs[rng.randrange(10 ** (digits - 1), 10**digits), rng.randrange(10, 100)] = None
    rows = [
        {
            "prompt": f"{a}*{b}=",
            "answer": str(a * b),
            "worked": worked(a, b),
            "tool": tool(a, b),
            "tool_digits": tool_digits(a, b),
            "a": a,
            "b": b,
            "id": i,
        }
        for i, (a, b) in enumerate(pairs)
    ]
    return split_rows(rows, SIZES)


def kinds(rows: dict[str, list]) -> dict[str, list[bool]]:
    """2x2 or 3x2 digits."""
    return {f"{d}x2": [len(str(a)) == d for a in rows["a"]] for d in (2, 3)}


def _task(
    name: str,
    summary: str,
    column: str,
    max_steps: int = 2000,
    chars: str = CHARS,
    correct: str = "final_answer",
    formats: Formats = FORMATS,
    **mix,
) -> Task:
    """One format: they differ in the column their reference imitates (and so where it is saved); `mix` gives a
    share of the problems the other column."""
    return register_task(
        Task(
            name=name,
            summary=summary,
            build=build,
            chars=chars,
            config=f"configs/{name}.yaml",
            correct=correct,
            dataset="multiplication",
            reference={
                **NATIVE_KERNELS,
                "output_dir": f"checkpoints/{name}",
                "completion_column": column,
                **mix,
                "train_size": 0,
                "dataset_test_split": "validation",
                "n_layer": 3,
                "n_embd": 96,
                "n_head": 4,
                "n_positions": 56,
                "max_steps": max_steps,
                "learning_rate": 3e-3,
            },
            kinds=kinds,
            formats=formats,
        )
    )


DIRECT = _task("multiplication", "2x2- and 3x2-digit products, the answer alone", "answer")
SCRATCHPAD = _task(
    "multiplication_scratchpad",
    "the same products, worked: partial products, their sum, the answer",
    "worked",
)
# The reasoning experiment's (docs/reasoning.md): one problem in four worked, the rest direct, nothing in the prompt
# to say which. Does GRPO, rewarded for the answer only, move the policy to the format that gets it right? The share
# is the smallest at which the worked format is better than the direct one, and 4000 steps (not 2000) make the worked
# format right often enough for RL to gain from it (both chosen on validation, docs/reasoning.md).
MIXED = _task(
    "multiplication_mixed",
    "the same products; the reference saw three direct answers for each worked one",
    "answer",
    max_steps=4000,
    mix_column="worked",
    mix_share=0.25,
    torch_num_threads=1,
)
# The tool-use experiment's (docs/tools.md): one problem in four a call to the calculator and its answer, the rest
# direct, as the reasoning experiment's reference mixes its formats. Does GRPO, rewarded for the answer only, move the
# policy to calling the tool? Its replies are the environment's (SFT leaves them out of the loss, as GRPO does).
TOOL = _task(
    "multiplication_tool",
    "the same products; the reference saw a call to the calculator on one problem in four, direct answers on the rest",
    "answer",
    chars=TOOL_CHARS,
    correct="tool_answer",
    formats=TOOL_FORMATS,
    mix_column="tool",
    mix_share=0.25,
    environment="calculator",
    torch_num_threads=1,
)
# The harder variant: the tool multiplies by one digit, so a product takes two calls and a sum the policy works
# itself (credit across calls: the reward judges only the final answer). Read by final_answer: the integer after the
# last '='.
TOOL_DIGITS = _task(
    "multiplication_tool_digits",
    "the same products; the reference saw two calls to a one-digit multiplier and the sum worked on one problem in "
    "four, direct answers on the rest",
    "answer",
    chars=TOOL_CHARS,
    formats=TOOL_FORMATS,
    mix_column="tool_digits",
    mix_share=0.25,
    environment="calculator_one_digit",
    torch_num_threads=1,
)
