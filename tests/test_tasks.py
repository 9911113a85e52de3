"""Tasks (tinygrpo/data/task.py, tinygrpo/data/tasks/): each generator, each verifier by a table of cases, and one short run
of each task end to end (its reference recipe, shrunk, then two GRPO steps from its config)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import train_grpo
import train_sft
from rewards import EOS, resolve_reward
from rewards.countdown import parse_expression
from tinygrpo.data.task import Task, get_task, register_task, task_names, task_of_dataset, task_of_reference
from tinygrpo.data.tasks import countdown, multiplication
from tinygrpo.data.verifier import Verifier

REPO = Path(train_grpo.__file__).resolve().parent
TASKS = task_names()
BUILT_IN = {
    "addition",
    "addition_long",
    "addition_long_mixed",
    "addition_long_reversed",
    "addition_long_worked",
    "chain_sum",
    "chain_sum_worked",
    "countdown",
    "multiplication",
    "multiplication_mixed",
    "multiplication_scratchpad",
    "multiplication_tool",
    "multiplication_tool_digits",
    "reverse",
    "seed_bank",
}


@pytest.fixture(scope="module")
def splits():
    return {name: get_task(name).build() for name in TASKS}


def test_every_built_in_task_is_registered():
    assert set(TASKS) >= BUILT_IN


def test_every_registered_task_is_a_row_of_the_docs_table():
    """docs/tasks.md's table of tasks names each registered task (a family, `reasoning_gym:NAME`, by its pattern):
    a task added without its row is caught here."""
    text = (REPO / "docs" / "tasks.md").read_text()
    table = text.split("## The tasks", 1)[1].split("\n\n", 2)[1]
    rows = {line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]}
    missing = [t for t in TASKS if t not in rows]
    assert not missing, f"tasks without a row in docs/tasks.md: {missing}"
    assert "reasoning_gym:NAME" in rows


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_generator_is_seeded_and_its_splits_are_disjoint(name, splits):
    task, rows = get_task(name), splits[name]
    assert task.build() == rows  # the same rows on every call
    prompts = {split: [r["prompt"] for r in split_rows] for split, split_rows in rows.items()}
    for split, ps in prompts.items():
        assert len(set(ps)) == len(ps), f"{name}/{split} repeats a problem"
    # (addition's validation is carved from its train split, kept apart as train_without_validation)
    train = "train_without_validation" if "train_without_validation" in prompts else "train"
    for a in (train, "validation", "test"):
        for b in ("validation", "test"):
            if a != b and a in prompts and b in prompts:
                assert not set(prompts[a]) & set(prompts[b]), f"{name}: {a} and {b} share problems"


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_gold_answer_passes_its_own_verifier_and_fits_the_alphabet(name, splits):
    task = get_task(name)
    verifier = Verifier.of(task.dataset, task=name)
    assert verifier.name == task.correct and verifier.target == task.target
    # (the dataset alone names the task of its own name, whose verifier decides unless a run names another)
    assert (
        Verifier.of(task.dataset).name
        == get_task(min(n for n in TASKS if get_task(n).dataset == task.dataset)).correct
    )
    for split, rows in splits[name].items():
        table = {c: [r[c] for r in rows] for c in rows[0]}
        golds = table[task.target]
        assert all(verifier([a + EOS for a in golds], table)), f"{name}/{split}"
        shown = [task.target]
        if task.formats is not None:  # a task with formats: the direct answer and the other one both right
            shown = ["answer", (task.reference or {}).get("mix_column") or "worked"]
            for column in shown:
                assert all(verifier([w + EOS for w in table[column]], table)), f"{name}/{split} {column}"
        # A wrong answer is wrong (the verifier is not constant).
        wrong = [a[:-1] if len(a) > 1 else a + a for a in golds]
        assert not any(verifier([w + EOS for w in wrong[:50]], {c: v[:50] for c, v in table.items()}))
        alphabet = set(task.chars)
        for r in rows:
            text = r["prompt"] + "".join(r[c] for c in shown)
            assert set(text) <= alphabet, f"{name}/{split}: {r['prompt']!r}"


def test_task_registry_errors_and_lookups():
    with pytest.raises(ValueError, match=r"unknown task 'nope' \(known tasks: .*addition"):
        get_task("nope")
    assert task_of_dataset("multiplication").correct == "final_answer"  # two tasks, one set, one verifier
    assert task_of_dataset(str(REPO / "data" / "countdown")).name == "countdown"
    assert task_of_dataset("some/dir/of/mine") is None
    assert Verifier.of("some/dir/of/mine").name == "accuracy"
    assert task_of_reference("checkpoints/reference").name == "addition"
    assert task_of_reference("checkpoints/reverse").name == "reverse"
    assert task_of_reference("elsewhere") is None
    t = get_task("addition")
    with pytest.raises(ValueError, match="already registered"):
        register_task(Task("addition", "x", lambda: {}, "0", "c.yaml"))
    assert get_task("addition") is t


def test_each_task_has_its_config_and_its_rewards_resolve():
    import yaml

    for name in BUILT_IN:
        task = get_task(name)
        for reward in (task.correct, *task.rewards):
            resolve_reward(reward)
        cfg = yaml.safe_load((REPO / task.config).read_text())
        assert cfg["dataset_name"] == task.dataset
        if task.reference is not None:
            assert cfg["model_name_or_path"] == task.reference["output_dir"]


# ---------------------------------------------------------------------------------------------------- generators


def test_countdown_gold_uses_each_number_once_and_reaches_the_target(splits):
    for r in splits["countdown"]["train"][:2000]:
        value, used = parse_expression(r["answer"])
        assert Counter(used) == Counter(r["numbers"]) and value == r["target"] and 1 <= r["target"] <= 100
        assert len(r["numbers"]) in (3, 4) and all(1 <= n <= 99 for n in r["numbers"])
        # An independent evaluation: Python's own arithmetic on the same text (digits, + - * and brackets only).
        assert re.fullmatch(r"[0-9+\-*()]+", r["answer"]) and eval(r["answer"]) == value  # noqa: S307


def test_multiplication_scratchpad_is_right_step_by_step(splits):
    for r in splits["multiplication"]["test"]:
        a, b = r["a"], r["b"]
        parts = r["worked"].split(",")
        assert parts[0] == f"{a}*{b % 10}={a * (b % 10)}"
        assert parts[1] == f"{a}*{b // 10 * 10}={a * (b // 10 * 10)}"
        assert parts[2] == f"{a * (b % 10)}+{a * (b // 10 * 10)}={a * b}" and r["answer"] == str(a * b)
        assert multiplication.completion_format(r["worked"] + EOS) == "scratchpad"
        assert multiplication.completion_format(r["answer"] + EOS) == "direct"


def test_reverse_and_addition_long_rows(splits):
    for r in splits["reverse"]["test"]:
        word = r["prompt"][:-1]
        assert r["answer"] == word[::-1] and 5 <= len(word) <= 12 and word.isalpha()
    for r in splits["addition_long"]["test"]:
        assert r["answer"] == str(r["a"] + r["b"]) and all(100 <= x < 10**6 for x in (r["a"], r["b"]))
    # the formats share one problem set: the same rows, each with its three targets (the reversed format's prompts
    # zero-padded to 6 digits)
    plain = splits["addition_long"]
    assert splits["addition_long_worked"] == splits["addition_long_mixed"] == plain
    padded = splits["addition_long_reversed"]
    assert padded.keys() == plain.keys()
    for split, rows in padded.items():
        for r, q in zip(rows, plain[split], strict=True):
            a, _, b = r["prompt"].removesuffix("=").partition("+")
            assert len(a) == len(b) == 6 and (int(a), int(b)) == (q["a"], q["b"]) == (r["a"], r["b"])
            assert {**r, "prompt": q["prompt"]} == q


def _column_totals_by_hand(a: int, b: int) -> list[int]:
    """Schoolbook addition on the digit strings, right-aligned by padding: each column's two digits and the carry."""
    x, y = str(a), str(b)
    n = max(len(x), len(y))
    x, y = x.zfill(n), y.zfill(n)
    totals, carry = [], 0
    for i in range(n - 1, -1, -1):
        totals.append(int(x[i]) + int(y[i]) + carry)
        carry = 1 if totals[-1] >= 10 else 0
    return totals


@settings(max_examples=300, deadline=None)
@given(st.integers(100, 999_999), st.integers(100, 999_999))
def test_long_addition_targets_are_the_sum_in_each_format(a, b):
    """The worked target's totals are schoolbook addition's columns and their units, read backwards after the last
    carry, are the sum; the reversed target read backwards is the sum."""
    from tinygrpo.data.tasks import addition_long

    work, _, total = addition_long.worked(a, b).rpartition("=")
    totals = [int(t) for t in work.split(",")]
    assert totals == _column_totals_by_hand(a, b) and int(total) == a + b
    digits = "".join(str(t % 10) for t in reversed(totals))
    assert (("1" if totals[-1] >= 10 else "") + digits).lstrip("0") == str(a + b)
    assert int(str(a + b)[::-1][::-1]) == a + b
    worked = resolve_reward("final_answer")(
        completions=[addition_long.worked(a, b) + EOS], answer=[str(a + b)]
    )
    reversed_ = resolve_reward("reversed_answer")(completions=[str(a + b)[::-1] + EOS], answer=[str(a + b)])
    assert worked == reversed_ == [1.0]


def _expression(prompt: str) -> tuple[list[int], list[str]]:
    """A padded chain-sum prompt read back: its terms (leading zeros dropped) and operators."""
    words = re.findall(r"[+-]|[0-9]+", prompt.removesuffix("="))
    return [int(w) for w in words[::2]], words[1::2]


def test_chain_sum_rows_are_drawn_as_reasoning_gym_draws_them(splits):
    """2 to 6 terms, all of one number of digits (1: 0 to 9; d: 10**(d-1) to 10**d - 1), + or -, padded to 4 digits
    and every prompt to 30 characters; the direct and worked formats share the rows; every class of terms and digits
    is drawn."""
    rows = [r for split in splits["chain_sum"].values() for r in split]
    assert splits["chain_sum_worked"] == splits["chain_sum"]
    classes = Counter()
    for r in rows:
        terms, ops = _expression(r["prompt"])
        assert (terms, "".join(ops)) == (r["terms"], r["ops"]) and 2 <= len(terms) <= 6
        assert re.fullmatch(r"[0-9]{4}([+-][0-9]{4})+ *=", r["prompt"]) and len(r["prompt"]) == 30, r[
            "prompt"
        ]
        d = len(str(max(terms)))
        low = 0 if d == 1 else 10 ** (d - 1)
        assert all(low <= t < 10**d for t in terms) and 1 <= d <= 4
        classes[len(terms), d] += 1
    assert set(classes) == {(n, d) for n in range(2, 7) for d in range(1, 5)}
    every = {t for r in rows for t in r["terms"]}
    assert min(every) == 0 and max(every) == 9999  # both ends of the range


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 9999), min_size=2, max_size=6), st.data())
def test_chain_sum_worked_totals_are_the_running_sums(terms, data):
    """Each total of the worked target, read as its sign then its digits units first, is the sum of the terms so far
    (by Python's own arithmetic on the expression's text); the answer after '=' is the whole sum; both formats'
    verifiers score the targets 1.0."""
    from tinygrpo.data.tasks import chain_sum

    ops = data.draw(st.lists(st.sampled_from("+-"), min_size=len(terms) - 1, max_size=len(terms) - 1))
    prompt = chain_sum.padded(terms, ops)
    work, _, answer = chain_sum.worked_total(terms, ops).rpartition("=")
    text = str(terms[0])
    for op, t, total in zip(ops, terms[1:], work.split(","), strict=True):
        text += f"{op}{t}"
        assert re.fullmatch(r"[+-][0-9]{5}", total)
        assert int(total[0] + total[:0:-1]) == eval(text)  # (sign, then the digits turned back around)
    assert (
        int(answer)
        == eval(text)
        == eval("".join(f"{op}{t}" for op, t in zip(["", *ops], terms, strict=True)))
    )
    assert _expression(prompt) == (terms, ops)
    worked = resolve_reward("final_answer")(completions=[f"{work}={answer}" + EOS], answer=[str(eval(text))])
    direct = resolve_reward("accuracy")(completions=[answer + EOS], answer=[eval(text)])
    assert worked == direct == [1.0]


# ----------------------------------------------------------------------------------------------------- verifiers

COUNTDOWN_CASES = [
    # (completion, numbers, target, countdown, countdown_partial)
    ("(95-37)*2<eos>", [95, 37, 2], 116, 1.0, 1.0),
    ("2*(95-37)<eos>", [95, 37, 2], 116, 1.0, 1.0),  # any right expression, not only the gold one
    ("95-37*2<eos>", [95, 37, 2], 116, 0.0, 0.1),  # precedence: 95 - 74 = 21
    ("(95-37)*2", [95, 37, 2], 116, 0.0, 0.0),  # truncated: no <eos>
    ("(95-37)*2<eos>1", [95, 37, 2], 116, 0.0, 0.0),  # text after <eos>
    ("(95-37)*2*1<eos>", [95, 37, 2], 116, 0.0, 0.1),  # a number that is not given
    ("(95-95)+116<eos>", [95, 37, 2], 116, 0.0, 0.1),  # a number used twice
    ("(95-37)<eos>", [95, 37, 2], 58, 0.0, 0.1),  # a number left unused
    ("(95-37)/2<eos>", [95, 37, 2], 29, 0.0, 0.0),  # division is not an operator here
    ("-2+95-37<eos>", [95, 37, 2], 56, 0.0, 0.0),  # no unary minus
    ("95-37*02<eos>", [95, 37, 2], 21, 0.0, 0.0),  # a leading zero
    ("95 - 37 - 2<eos>", [95, 37, 2], 56, 0.0, 0.0),  # spaces
    ("９５-37-2<eos>", [95, 37, 2], 56, 0.0, 0.0),  # full-width digits
    ("(95-37-2<eos>", [95, 37, 2], 56, 0.0, 0.0),  # unbalanced
    ("95-37-2)<eos>", [95, 37, 2], 56, 0.0, 0.0),
    ("()<eos>", [95, 37, 2], 56, 0.0, 0.0),
    ("<eos>", [95, 37, 2], 56, 0.0, 0.0),
    ("", [95, 37, 2], 56, 0.0, 0.0),
    ("95-37-2=56<eos>", [95, 37, 2], 56, 0.0, 0.0),  # an equation is not an expression
    ("95--37-2<eos>", [95, 37, 2], 56, 0.0, 0.0),
    ("(" * 17 + "1" + ")" * 17 + "<eos>", [1], 1, 0.0, 0.0),  # deeper than 16 levels
    ("(" * 16 + "1" + ")" * 16 + "<eos>", [1], 1, 1.0, 1.0),  # 16 levels: the limit
    ("((((((((1))))))))<eos>", [1], 1, 1.0, 1.0),
    ("9" * 70 + "<eos>", [9], 9, 0.0, 0.0),  # longer than 64 characters
    ("3*4-5+6<eos>", [3, 4, 5, 6], 13, 1.0, 1.0),
    ("6-5+3*4<eos>", [6, 5, 4, 3], 13, 1.0, 1.0),
    ("5*5-5<eos>", [5, 5, 5], 20, 1.0, 1.0),  # repeated numbers: each copy once
    ("5*5-5-5<eos>", [5, 5, 5], 10, 0.0, 0.1),
]


@pytest.mark.parametrize("completion, numbers, target, right, partial", COUNTDOWN_CASES)
def test_countdown_verifiers(completion, numbers, target, right, partial):
    kw = {"completions": [completion], "numbers": [numbers], "target": [target]}
    assert resolve_reward("countdown")(**kw) == [right]
    assert resolve_reward("countdown_partial")(**kw) == [partial]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789+-*()/ =x<eos>")), max_size=80))
def test_countdown_never_raises_and_agrees_with_python(text):
    parsed = parse_expression(text)
    r = resolve_reward("countdown_partial")(completions=[text + EOS], numbers=[[1, 2]], target=[3])
    assert r[0] in (0.0, 0.1, 1.0) and (r[0] > 0) == (parsed is not None)
    if parsed is not None:  # the same text is Python arithmetic (no leading zeros, no unary minus, no '/')
        assert eval(text) == parsed[0]  # noqa: S307


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 99), min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_random_expressions_use_each_number_once(numbers, seed):
    text = countdown.random_expression(numbers, random.Random(seed))
    value, used = parse_expression(text)
    assert Counter(used) == Counter(numbers) and value == eval(text)  # noqa: S307


FINAL_ANSWER_CASES = [
    ("37*8=296,37*40=1480,296+1480=1776<eos>", 1776, 1.0),
    ("1776<eos>", 1776, 1.0),  # the direct format
    ("296+1480=1775<eos>", 1776, 0.0),
    ("296+1480=01776<eos>", 1776, 0.0),  # a leading zero
    ("296+1480=1776", 1776, 0.0),  # truncated
    ("296+1480=1776<eos>=", 1776, 0.0),
    ("1776<eos>=1776<eos>", 1776, 0.0),  # nothing after <eos>
    ("1776=1<eos>", 1776, 0.0),  # the last '=' decides
    ("x=+1776<eos>", 1776, 0.0),
    ("=1776<eos>", 1776, 1.0),
    ("1776 <eos>", 1776, 0.0),
    ("１７７６<eos>", 1776, 0.0),
    ("", 1776, 0.0),
    ("0<eos>", 0, 1.0),
    ("a\n=1776<eos>", 1776, 1.0),  # any work before the last '='
    ("-06000,-63000,-71100,-92100=-129<eos>", -129, 1.0),  # a negative answer (chain_sum_worked)
    ("-129<eos>", "-129", 1.0),
    ("=-0<eos>", 0, 0.0),
    ("=-129<eos>", 129, 0.0),
    ("-92100=129<eos>", -129, 0.0),  # the minus of the work is not the answer's
    ("=--129<eos>", -129, 0.0),
]


@pytest.mark.parametrize("completion, gold, want", FINAL_ANSWER_CASES)
def test_final_answer(completion, gold, want):
    fn = resolve_reward("final_answer")
    assert fn(completions=[completion], answer=[str(gold)]) == [want]
    assert fn(completions=[completion], answer=[gold]) == [want]
    assert fn(completions=[completion], answer=[None]) == [None]


EXACT_CASES = [
    ("olleh<eos>", "olleh", 1.0),
    ("olleh", "olleh", 0.0),
    ("olle<eos>", "olleh", 0.0),
    ("Olleh<eos>", "olleh", 0.0),
    (" olleh<eos>", "olleh", 0.0),
    ("olleh<eos><eos>", "olleh", 0.0),
    ("<eos>", "", 1.0),
]


REVERSED_CASES = [
    # (completion, gold, reversed_answer)
    ("02194<eos>", "49120", 1.0),  # least significant digit first
    ("49120<eos>", "49120", 0.0),  # the usual order is wrong here
    ("021940<eos>", "49120", 0.0),  # a leading zero once read backwards
    ("0<eos>", "0", 1.0),
    ("00<eos>", "0", 0.0),
    ("1<eos>", 1, 1.0),  # an int gold
    ("02194", "49120", 0.0),  # truncated: no <eos>
    ("02194<eos>4", "49120", 0.0),  # text after <eos>
    ("0219 4<eos>", "49120", 0.0),
    ("+02194<eos>", "49120", 0.0),
    ("０２１９４<eos>", "49120", 0.0),  # full-width digits
    ("<eos>", "0", 0.0),
    ("1000000000000000000000000000001<eos>", "1000000000000000000000000000001", 1.0),  # any length, exactly
    ("2000000000000000000000000000001<eos>", "1000000000000000000000000000001", 0.0),
]


@pytest.mark.parametrize("completion, gold, want", REVERSED_CASES)
def test_reversed_answer(completion, gold, want):
    completion = completion.replace("<eos>", EOS)
    assert resolve_reward("reversed_answer")(completions=[completion], answer=[gold]) == [want]
    assert resolve_reward("reversed_answer")(completions=[completion], answer=[None]) == [None]


@pytest.mark.parametrize("completion, gold, want", EXACT_CASES)
def test_exact_match(completion, gold, want):
    assert resolve_reward("exact_match")(completions=[completion], answer=[gold]) == [want]


def test_verifiers_name_a_bad_dataset_column():
    with pytest.raises(TypeError, match="string gold"):
        resolve_reward("exact_match")(completions=["1<eos>"], answer=[1])
    with pytest.raises(TypeError, match="list of numbers"):
        resolve_reward("countdown")(completions=["1<eos>"], numbers=[1], target=[1])


# ---------------------------------------------------------------------------------------------------- end to end


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUILT_IN - {"seed_bank", "addition"}))
def test_task_trains_end_to_end(name, tmp_path, capfd):
    """The task's reference recipe (shrunk: a 1-layer model, 30 steps) and two GRPO steps of its config on it: the
    held-out accuracy is the task's verifier's (its metric is there), and the run finishes."""
    ref, out = tmp_path / "ref", tmp_path / "run"
    shrink = "--n_layer 1 --n_embd 32 --max_steps 30 --per_device_train_batch_size 32 --dataset_test_split  --torch_num_threads 1".split(
        " "
    )
    # (in process, the entry points' main() as their command lines run them: a second each, not a Python start)
    assert train_sft.main(["--task", name, "--output_dir", str(ref), *shrink]) == 0, capfd.readouterr().err
    assert json.loads((ref / "sft_config.json").read_text())["task"] == name
    task = get_task(name)
    grpo = ["--config", task.config, "--model_name_or_path", str(ref), "--output_dir", str(out)]
    grpo += "--max_steps 2 --per_device_train_batch_size 16 --dataset_test_split validation --eval_steps 2".split()
    grpo += "--save_steps 0 --make_plots false --disable_tqdm true --torch_num_threads 1".split()
    assert train_grpo.main(grpo) == 0, capfd.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in rows if "eval/accuracy" in row]
    assert evals and all(0.0 <= row["eval/accuracy"] <= 1.0 for row in evals)
    if task.kinds is not None:  # the task's own breakdown of held-out accuracy
        assert any(k.startswith("eval/accuracy/") for k in evals[-1])
    steps = [row for row in rows if "reward" in row]
    if task.formats is not None:  # the share of each format, held-out greedy and sampled: a whole, each
        for row, prefix in ((evals[-1], "eval/format/"), (steps[-1], "completions/format/")):
            shares = [row[prefix + f] for f in task.formats.names]
            assert abs(sum(shares) - 1) < 1e-9 and all(0 <= x <= 1 for x in shares)
        assert evals[-1]["eval/mean_length"] >= 1  # (<eos> at least)
    # every sampled completion is right or wrong: the two mean lengths bracket the overall mean
    right, wrong = (steps[-1].get(f"completions/mean_length_{k}") for k in ("right", "wrong"))
    mean = steps[-1]["completions/mean_length"]
    assert wrong is not None or right is not None
    if right is not None and wrong is not None:
        assert min(right, wrong) - 1e-9 <= mean <= max(right, wrong) + 1e-9
    else:
        assert (right if right is not None else wrong) == pytest.approx(mean)


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--task", "nope"], "error: unknown task 'nope' (known tasks: "),
        (["--task", "seed_bank"], "error: task 'seed_bank' has no reference recipe of its own"),
        (
            ["--task", "reverse", "--completion_column", "worked"],
            "error: completion_column 'worked': reverse/train",
        ),
        (
            ["--task", "multiplication_mixed", "--mix_column", "nope"],
            "error: mix_column 'nope': multiplication/train has no such column",
        ),
        (["--mix_share", "0.5"], "error: mix_share=0.5 needs mix_column"),
        # a character outside the alphabet given for the task's text: named with its row, before any training
        (["--task", "reverse", "--chars", "abc="], "error: reverse/train row 1: character "),
    ],
)
def test_train_sft_task_errors(argv, message, tmp_path):
    # In a subprocess: loading a split in this process (pyarrow's threads and allocator) breaks the forked children
    # of tests/test_fuzz_config.py when it runs after this file.
    r = _run("train_sft.py", *argv, "--output_dir", str(tmp_path / "ref"))
    assert r.returncode == 1
    err = r.stderr
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not (tmp_path / "ref").exists()


def test_tasks_study_table_reads_finished_runs(tmp_path):
    """studies.tasks: a row from finished runs (summary.json, metrics.jsonl), the median over seeds (not the mean:
    the seeds differ so that the two differ in every column), the training seconds of the LAST logged row (an
    earlier row logs fewer), and no row for a task without one."""
    from studies import tasks as study

    for seed, after, secs in ((42, 0.70, 60.0), (1, 0.74, 66.0), (2, 0.60, 90.0)):
        d = study.run_dir(tmp_path, "reverse", seed)
        d.mkdir(parents=True)
        summary = {"eval_before": {"eval/accuracy": 0.46}, "eval_after": {"eval/accuracy": after}}
        (d / "summary.json").write_text(json.dumps(summary))
        rows = [{"step": 0, "eval/accuracy": 0.46}, {"step": 1, "completions/mean_length": 9.0 + seed % 2}]
        rows.append({"step": 5, "time/elapsed": 5.0, "completions/mean_length": 30.0})
        rows.append({"step": 300, "time/elapsed": secs, "eval/accuracy": after})
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = study.summarize(["reverse", "countdown"], [42, 1, 2], tmp_path, "python -m studies.tasks")
    assert [t["task"] for t in results["tasks"]] == ["reverse"] and results["measurement"]["machine"]["cpu"]
    text = study.table(json.loads(json.dumps(results)))  # (as read back from docs/results/tasks.json)
    lines = text.splitlines()
    assert len(lines) == 3 and lines[2].startswith("| `reverse` | `")
    cells = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert (
        cells[2] == "9.0" and cells[3] == "46.0%" and cells[4].startswith("**70.0%** (70.0% / 74.0% / 60.0%")
    )
    assert cells[5] == "+24.0 points" and cells[6] == "1.1"  # median 66 s


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")[1:-1]]


def test_tasks_references_table_draws_its_results():
    """docs/tasks.md's references (docs/results/tasks_references.json): a model shared with the row above is 'the
    same' (the first row names its parameters), and a longer run's, the worked share's and the minutes' cells."""
    from studies.tasks import references_table

    small, big = (
        {"layers": 2, "width": 64, "parameters": 104000},
        {"layers": 3, "width": 96, "parameters": 342624},
    )
    results = {
        "references": [
            {"task": "reverse", "model": small, "sft": "400 steps", "validation": 0.46},
            {
                "task": "a",
                "model": big,
                "sft": "2000 steps",
                "validation": 0.036,
                "longer": {"steps": 1000, "validation": 0.96},
            },
            {"task": "b", "model": dict(big), "sft": "the same", "validation": 0.174, "worked": 0.176},
            {"task": "c", "model": small, "sft": "4000 steps", "sft_minutes": 14.0, "validation": 0.048},
        ]
    }
    lines = references_table(json.loads(json.dumps(results))).splitlines()
    assert lines[0] == "| task | model | SFT | validation |" and len(lines) == 6
    assert _cells(lines[2]) == ["`reverse`", "2 layers, 64 wide (104,000 parameters)", "400 steps", "46.0 %"]
    assert _cells(lines[3]) == [
        "`a`",
        "3 layers, 96 wide (342,624)",
        "2000 steps",
        "3.6 % (1000 steps: 96.0 %)",
    ]
    assert _cells(lines[4]) == ["`b`", "the same", "the same", "17.4 % (17.6 % of greedy completions worked)"]
    assert _cells(lines[5]) == ["`c`", "2 layers, 64 wide (104,000)", "4000 steps (14 min)", "4.8 %"]


def test_tasks_recipe_screen_table_draws_its_results():
    """docs/tasks.md's GRPO recipe screen (docs/results/tasks_recipes.json): each method's evaluations in step order
    (the first and the last both shown), the rates in the head, other rates after a ';'."""
    from studies.tasks import recipes_table

    results = {
        "default_lr": 2e-3,
        "lr": 5e-4,
        "rows": [
            {
                "task": "countdown",
                "reference": 0.124,
                "default": {"evals": {"25": 0.288, "75": 0.336}, "collapsed": True},
                "no_explore": {"evals": {"300": 0.156}},
                "other_lr": [{"lr": 1e-3, "evals": {"300": 0.166, "1000": 0.286}}],
            }
        ],
    }
    lines = recipes_table(json.loads(json.dumps(results))).splitlines()
    assert lines[0] == "| task | default method (lr 2e-3, explore rounds) | lr 5e-4, no explore rounds |"
    assert _cells(lines[2]) == [
        "`countdown`",
        "12.4 % -> 28.8 % at step 25, 33.6 % at step 75 (collapsed, stopped)",
        "12.4 % -> 15.6 % at step 300; at lr 1e-3 16.6 % at step 300, 28.6 % at step 1000",
    ]


def test_tasks_reasoning_gym_table_shows_the_median_seed():
    """docs/tasks.md's reasoning-gym table (docs/results/tasks_reasoning_gym.json): the MEDIAN of the seeds (they
    are skewed so that a mean gives other text), in bold only where its gain over the reference is larger than the
    seeds' spread; a reference of other SFT steps than the table's says so."""
    from studies.tasks import reasoning_gym_table

    results = {
        "sft_steps": 1000,
        "datasets": [
            {
                "dataset": "spell_backward",
                "prompt": "sniff=",
                "answer": "ffins",
                "sft_steps": 250,
                "validation_at_default_steps": 0.99,
                "reference": 0.1,
                "after": {"42": 0.5, "1": 0.6, "2": 0.62},
                "seconds": 131.4,
            },
            {
                "dataset": "chain_sum",
                "prompt": "1+2=",
                "answer": "3",
                "sft_steps": 1000,
                "reference": 0.30,
                "after": {"42": 0.30, "1": 0.31, "2": 0.60},
                "seconds": 51.0,
            },
        ],
    }
    lines = reasoning_gym_table(json.loads(json.dumps(results))).splitlines()
    assert _cells(lines[2]) == [
        "`spell_backward` (reference of 250 SFT steps, `--max_steps 250`: at 1000 it answers 99.0 % of validation)",
        "`sniff=` -> `ffins`",
        "10.0 %",
        "**60.0 %** (50.0 / 60.0 / 62.0)",  # (mean 57.3 %)
        "131 s",
    ]
    # median 31.0 % (mean 40.3 %): a gain of 1 point within a spread of 30, not bold
    assert _cells(lines[3])[2:] == ["30.0 %", "31.0 % (30.0 / 31.0 / 60.0)", "51 s"]


@pytest.mark.slow
def test_build_script_refuses_an_unknown_task(tmp_path):
    r = _run("data/build.py", "--task", "nope", "--out", str(tmp_path))
    assert r.returncode == 1 and r.stderr.startswith("error: unknown task 'nope' (known tasks: ")
    assert r.stderr.count("\n") == 1 and not any(tmp_path.iterdir())
    r = _run("data/build.py", "--task", "reverse", "--out", str(tmp_path))
    assert r.returncode == 0 and sorted(p.name for p in (tmp_path / "reverse").iterdir()) == [
        "manifest.json",
        "test.jsonl",
        "train.jsonl",
        "validation.jsonl",
    ]
