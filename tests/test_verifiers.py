"""What the verifiers and task files promise that a one-line change could break unseen (issue 43): each test pins one
behaviour that a hand mutation round found no test for, as a table of cases or a property.

- countdown: each number used exactly as many times as it is given (a count, not a set), and the 64-character limit;
- every verifier: a right completion cut off before its <eos> (or followed by anything else) scores 0;
- held-out accuracy: right means a score of exactly 1.0, whatever partial credit the verifier gives; pass@k is any of
  k; a task's verifier carries its kinds and formats;
- a family's data directory (data/reasoning_gym_chain_sum) names its task, and so its verifier; a committed task's
  files without a manifest are the user's;
- the generators: countdown's problems distinct whatever the numbers' order, every documented value reached, a small
  reasoning-gym generator's splits;
- reasoning-gym's prompts: the instruction every question shares is dropped;
- the problem kinds held-out accuracy is broken down by, at their boundaries.
"""

from __future__ import annotations

import importlib
import json
import os
import random
from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinygrpo.data.task as task_module
from rewards import EOS, list_rewards, resolve_reward
from rewards.countdown import MAX_CHARS, parse_expression
from tinygrpo.data.problems import DATA_DIR
from tinygrpo.data.task import TASK_FAMILIES, Task, discover_tasks, get_task, task_of_dataset
from tinygrpo.data.tasks import addition, addition_long, countdown, multiplication, reverse
from tinygrpo.data.verifier import Verifier

Columns = dict[str, Any]


def _score(name: str, completions: list[str], columns: Columns, **kw: Any) -> list[float | None]:
    """One reward on a batch whose every row has the same `columns` (a row's value each), by keyword as TRL calls it."""
    batch = {key: [value] * len(completions) for key, value in columns.items()}
    return resolve_reward(name)(completions=list(completions), **batch, **kw)


def _rg() -> Any:
    # As tests/test_reasoning_gym.py: CI installs the extra, so there a missing reasoning-gym fails instead of skipping.
    if os.environ.get("CI"):
        return importlib.import_module("reasoning_gym")
    return pytest.importorskip("reasoning_gym")


@pytest.fixture(scope="module")
def rg() -> Any:
    return _rg()


@cache
def _rg_rows(name: str, n: int = 2) -> tuple[tuple[str, Columns], ...]:
    """(reasoning-gym's own answer, the row's columns) for a few real entries, the entry as the adapter stores it."""
    rows = []
    for e in _rg().create_dataset(name, size=n, seed=1):
        item = {"question": e["question"], "answer": e["answer"], "metadata": e["metadata"]}
        rows.append((str(e["answer"]), {"entry": json.dumps(item, default=str)}))
    return tuple(rows)


# ------------------------------------------------------------------------------ every verifier needs its <eos>

# Per registered reward, completions that are right (the text before <eos>) with their row. A reward registered
# later fails test_every_registered_reward_is_classified until it is added here or to NO_EOS_RULE with a reason.
RIGHT: dict[str, list[tuple[str, Columns]]] = {
    "accuracy": [("85", {"answer": "85"}), ("0", {"answer": 0}), ("-85", {"answer": "-85"})],
    "final_answer": [
        ("296+1480=1776", {"answer": "1776"}),
        ("1776", {"answer": 1776}),
        ("+70000,-30000=-3", {"answer": "-3"}),
    ],
    "digit_match": [("85", {"answer": "85"}), ("1000", {"answer": 1000})],
    "reversed_answer": [("02194", {"answer": "49120"}), ("1", {"answer": 1})],
    "tool_answer": [
        ("<37*48=1776>1776", {"answer": "1776"}),
        ("1776", {"answer": 1776}),
        ("<37*8=296><37*40=1480><296+1480=1776>1776", {"answer": "1776"}),
    ],
    "format": [("85", {}), ("007", {})],  # (well formed is all `format` asks)
    "exact_match": [("olleh", {"answer": "olleh"}), ("a", {"answer": "a"})],
    "countdown": [
        ("(95-37)*2", {"numbers": [95, 37, 2], "target": 116}),
        ("5*5-5", {"numbers": [5] * 3, "target": 20}),
    ],
    "countdown_partial": [("(95-37)*2", {"numbers": [95, 37, 2], "target": 116})],
    "guess_found": [
        ("32?<16?=", {"target": 16}),
        ("0?=", {"target": 0}),
        ("07?!40?>50?.63?=", {"target": 63}),
    ],
    "reasoning_gym": [],  # real entries, drawn in `_right`
    "reasoning_gym_final_answer": [],  # chain_sum's real entries, worked and direct, drawn in `_right`
}
RG_SETS = ("chain_sum", "spell_backward", "basic_arithmetic")
NO_EOS_RULE = {
    "accuracy_lenient": "tolerates a missing <eos> by design (its doc and rewards/README.md)",
    "length_penalty": "scores the length of the ids, not the text",
    "guess_turns": "reads the episode's state (environments), not the text: the environment ends a found episode",
}


def _registered() -> list[str]:
    # (test_rewards.py drops a reward file into rewards/ for one test and removes it: not one of ours)
    return sorted(n for n in list_rewards() if not n.startswith("zz_test_dropin"))


def _right(name: str) -> list[tuple[str, Columns]]:
    if name == "reasoning_gym":
        return [row for s in RG_SETS for row in _rg_rows(s)]
    if name == "reasoning_gym_final_answer":
        return [(work + answer, row) for answer, row in _rg_rows("chain_sum") for work in ("", "+1,-2=")]
    return RIGHT[name]


def test_every_registered_reward_is_classified() -> None:
    assert set(_registered()) == set(RIGHT) | set(NO_EOS_RULE)


@pytest.mark.parametrize("name", sorted(set(_registered()) - set(NO_EOS_RULE)))
@settings(max_examples=15, deadline=None)
@given(tail=st.text(min_size=len(EOS), max_size=len(EOS)).filter(lambda t: t != EOS))
def test_a_right_completion_without_eos_scores_zero(name: str, tail: str) -> None:
    """Cut off at the length limit, a completion has no <eos>: with the check that it ends in one dropped, a verifier
    would read `text + tail` minus its last len(<eos>) characters, the right answer, and score it."""
    cases = _right(name)
    assert cases, name
    for text, columns in cases:
        assert _score(name, [text + EOS], columns) == [1.0], (name, text)  # (the case is a right one)
        assert _score(name, [text, text + tail, text + EOS + tail], columns) == [0.0, 0.0, 0.0], (name, text)


@pytest.mark.parametrize("name", sorted(set(_registered()) - set(NO_EOS_RULE)))
def test_each_verifier_reads_the_trainers_eos(name: str) -> None:
    # The trainer passes its own marker as `eos`: a verifier that looks for the default one instead is wrong.
    for text, columns in _right(name):
        assert _score(name, [text + "</s>", text + EOS], columns, eos="</s>") == [1.0, 0.0], (name, text)


# ------------------------------------------------------------------------------------ countdown: the numbers


# (completion before <eos>, numbers, target, why): every one of them has the target's value and is wrong only in how
# it uses the numbers, so each is 0.0 for `countdown` and 0.1 (well formed, wrong) for `countdown_partial`.
MISUSED = [
    ("(95-37)*2+2-2", [95, 37, 2], 116, "a number used twice while all are used"),
    ("95+95-37*2", [95, 37, 2], 116, "a number used twice, the others once each"),
    ("(95-37)*2*2-116", [95, 37, 2], 116, "two uses too many, and a number not given"),
    ("5*3", [5, 5, 3], 15, "a number given twice used once"),
    ("5*5-5-3", [5, 5, 3], 17, "a number given twice used three times"),
    ("5*5-3", [5, 3], 22, "a number given once used twice"),
    ("(95-37)*2", [95, 37, 2, 1], 116, "a number left unused"),
    ("(95-37)*2*1", [95, 37, 2], 116, "a number not given"),
    ("95*2", [9, 5, 2], 190, "two numbers joined into one"),
    ("(95-37)*2+0", [95, 37, 2], 116, "a zero not given"),
]


@pytest.mark.parametrize("text, numbers, target, why", MISUSED)
def test_countdown_each_number_exactly_as_often_as_given(
    text: str, numbers: list[int], target: int, why: str
) -> None:
    assert parse_expression(text)[0] == target  # (right but for the numbers)
    columns = {"numbers": numbers, "target": target}
    assert _score("countdown", [text + EOS], columns) == [0.0], why
    assert _score("countdown_partial", [text + EOS], columns) == [0.1], why


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 99), min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_countdown_right_only_with_each_number_its_own_count(numbers: list[int], seed: int) -> None:
    """A gold-like expression is right for its numbers in any order; the same value with one number used once more
    (`+n-n`), or against numbers with one copy more or one fewer, is wrong."""
    text = countdown.random_expression(numbers, random.Random(seed))
    target = parse_expression(text)[0]

    def right(t: str, ns: list[int]) -> bool:
        return _score("countdown", [t + EOS], {"numbers": ns, "target": target}) == [1.0]

    assert right(text, numbers) and right(text, numbers[::-1])
    for n in set(numbers):
        assert parse_expression(f"{text}+{n}-{n}")[0] == target
        assert not right(f"{text}+{n}-{n}", numbers), n
        assert not right(text, [*numbers, n]), n
    for i in range(len(numbers)):
        assert not right(text, numbers[:i] + numbers[i + 1 :]), i


def _of_length(n: int) -> tuple[str, list[int], int]:
    """A right countdown expression of exactly n characters (n >= 1): "1+1+...", led by "11" when n is even."""
    first = "11" if n % 2 == 0 else "1"
    k = (n - len(first)) // 2
    return first + "+1" * k, [int(first)] + [1] * k, int(first) + k


@pytest.mark.parametrize("n", [1, 2, 62, 63, MAX_CHARS, MAX_CHARS + 1, MAX_CHARS + 2])
def test_countdown_takes_64_characters_and_no_more(n: int) -> None:
    text, numbers, target = _of_length(n)
    assert len(text) == n
    fits = n <= 64  # rewards/countdown.py and its README: "at most 64 characters" (the <eos> not counted)
    assert (parse_expression(text) is not None) == fits
    columns = {"numbers": numbers, "target": target}
    assert _score("countdown", [text + EOS], columns) == [1.0 if fits else 0.0]
    assert _score("countdown_partial", [text + EOS], columns) == [1.0 if fits else 0.0]


# ------------------------------------------------------------------------- held-out accuracy: exactly 1.0 only


def _table_reward(completions: list[str], score: list[Any], **kwargs: Any) -> list[Any]:
    """Returns the `score` column as it is: a verifier that gives whatever score a case needs."""
    return list(score)


SCORES = [1.0, 1, True, 0.0, False, 0.1, 0.5, 2 / 3, 0.999999, 1.000001, 2.0, -1.0, None]


def test_held_out_accuracy_counts_a_score_of_exactly_one() -> None:
    # Verifier's rule (tinygrpo/data/verifier.py): 1.0 right; None "or any other score is wrong", partial credit too.
    rows = {"prompt": ["p"] * len(SCORES), "score": SCORES}
    right = Verifier("table", _table_reward)(["x"] * len(SCORES), rows)
    assert right == [s is not None and s == 1 for s in SCORES]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.none() | st.floats(-2, 2) | st.sampled_from([0.0, 0.1, 0.5, 1.0]), min_size=1, max_size=8))
def test_held_out_rule_on_any_scores(scores: list[float | None]) -> None:
    rows = {"prompt": ["p"] * len(scores), "score": scores}
    assert Verifier("table", _table_reward)(["x"] * len(scores), rows) == [s == 1.0 for s in scores]


# (reward, completion, row, its score): real partial credit, which held-out accuracy must count as wrong
PARTIAL = [
    ("digit_match", "86<eos>", {"answer": "85"}, 0.5),
    ("digit_match", "185<eos>", {"answer": "85"}, 2 / 3),
    ("countdown_partial", "95-37*2<eos>", {"numbers": [95, 37, 2], "target": 116}, 0.1),
    ("countdown_partial", "(95-37)*2+2-2<eos>", {"numbers": [95, 37, 2], "target": 116}, 0.1),
]


@pytest.mark.parametrize("name, completion, columns, score", PARTIAL)
def test_partial_credit_is_not_right(name: str, completion: str, columns: Columns, score: float) -> None:
    assert _score(name, [completion], columns) == [pytest.approx(score)]
    verifier = Verifier(name, resolve_reward(name))
    table = {"prompt": ["p", "p"], **{k: [v, v] for k, v in columns.items()}}
    gold = {"digit_match": "85<eos>", "countdown_partial": "(95-37)*2<eos>"}[name]
    assert verifier([completion, gold], table) == [False, True]


def test_reasoning_gym_partial_credit_is_not_right(rg: Any) -> None:
    # reasoning-gym's own scorers give partial credit to a near answer ("-4x" for "-4": 2/3).
    verifier = Verifier("reasoning_gym", resolve_reward("reasoning_gym"))
    for answer, columns in _rg_rows("chain_sum", 4):
        near = answer + "x" + EOS
        assert 0 < _score("reasoning_gym", [near], columns)[0] < 1
        assert verifier([near, answer + EOS], {"prompt": ["p", "p"], "entry": [columns["entry"]] * 2}) == [
            False,
            True,
        ]


def test_verifier_gives_each_row_its_k_completions() -> None:
    # Row i judges completions[i * k : (i + 1) * k] (pass@k): each row's columns repeated k times, in place.
    def echoes(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        return [float(c == p[::-1] + EOS) for p, c in zip(prompts, completions, strict=True)]

    rows = {"prompt": ["ab", "cd"], "answer": ["ba", "dc"]}
    comps = ["ba<eos>", "dc<eos>", "ba<eos>", "dc<eos>", "dc<eos>", "ba<eos>"]
    want = [True, False, True, True, True, False]
    assert Verifier("exact_match", resolve_reward("exact_match"))(comps, rows, k=3) == want
    assert Verifier("echoes", echoes)(comps, rows, k=3) == want  # the prompts too


def test_held_out_metrics_read_the_verifier_pass_at_k_is_any_of_k(monkeypatch: pytest.MonkeyPatch) -> None:
    """held_out_metrics on completions given here (the model's decoding stubbed out): accuracy and its breakdown by
    kind from the greedy ones, pass@k right where any of a prompt's k samples is."""
    import torch

    from tinygrpo.rollout import evaluation
    from tinygrpo.rollout.config import SamplingParams

    # 37+48 (carry), 5+7 (one digit, carry), 3+4 (one digit), 20+50 (none of them)
    rows = {"prompt": ["37+48=", "5+7=", "3+4=", "20+50="], "answer": ["85", "12", "7", "70"]}
    rows |= {"a": [37, 5, 3, 20], "b": [48, 7, 4, 50]}
    greedy = ["85<eos>", "1<eos>", "7<eos>", "70"]  # right, wrong, right, cut off (wrong)
    samples = ["1<eos>", "85<eos>", "2<eos>"] + ["13<eos>"] * 3 + ["7<eos>"] * 3 + ["70", "70<eos>", "7<eos>"]
    monkeypatch.setattr(evaluation, "greedy_completions", lambda *args, **kw: list(greedy))
    rollout = type("Rollout", (), {"completion_ids": None, "completion_mask": None})()
    monkeypatch.setattr(evaluation, "sample_completions", lambda *args, **kw: rollout)
    monkeypatch.setattr(evaluation, "decode_completions", lambda *args, **kw: list(samples))
    tok = type("Tok", (), {"eos_token_id": 1, "pad_token_id": 0})()
    verifier = Verifier("accuracy", resolve_reward("accuracy"), kinds=addition.row_kinds)
    params, gen = SamplingParams(4, 1.0), torch.Generator().manual_seed(0)
    ids = torch.zeros(4, 6, dtype=torch.long)
    held = evaluation.held_out_metrics(
        None, tok, ids, ids + 1, rows, params, gen, pass_k=3, verifier=verifier
    )
    assert held.right == [True, False, True, False] and held.completions == greedy
    assert held.metrics == {
        "eval/accuracy": 0.5,
        "eval/accuracy/one_digit_operand": 0.5,
        "eval/accuracy/carry": 0.5,  # (no sum_ge_100 problem: no such key)
        "eval/pass@3": 0.75,
    }


@pytest.mark.parametrize(
    "name", ["addition", "countdown", "multiplication_scratchpad", "reverse", "seed_bank"]
)
def test_a_tasks_verifier_carries_its_kinds_and_formats(name: str) -> None:
    task = get_task(name)
    verifier = Verifier.of(task.dataset)
    assert (verifier.name, verifier.kinds, verifier.formats) == (task.correct, task.kinds, task.formats)


# ---------------------------------------------------------------- a family's data directory names its task


@pytest.fixture
def no_family_tasks(monkeypatch: pytest.MonkeyPatch) -> dict[str, Task]:
    """The task registry as a fresh process has it: built-in tasks only. A family's task asked for earlier (by another
    test) would be found by its dataset name directly, and the lookup by data directory never be exercised."""
    discover_tasks()  # (imports every task file now: none re-registers a family over the stubs below)
    tasks = {n: t for n, t in task_module.TASKS.items() if ":" not in n}
    monkeypatch.setattr(task_module, "TASKS", tasks)
    return tasks


FAMILY_MEMBERS = ["chain_sum", "a", "x_y_z", "n2", "basic_arithmetic"]


def _members(prefix: str) -> list[str]:
    if prefix == "reasoning_gym":
        return sorted(_rg().factory.DATASETS)  # every one of its datasets
    return FAMILY_MEMBERS


def test_every_family_data_directory_resolves_to_its_task(
    no_family_tasks: dict[str, Task], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    for prefix in sorted(TASK_FAMILIES):

        def make(name: str, prefix: str = prefix) -> Task:  # (the real one draws the data: seconds each)
            asked.append(name)
            return Task(f"{prefix}:{name}", "stub", dict, "", "", correct="exact_match")

        monkeypatch.setitem(TASK_FAMILIES, prefix, make)
        for name in _members(prefix):
            asked.clear()
            task = task_of_dataset(f"{prefix}_{name}")
            assert asked == [name] and task is not None and task.name == f"{prefix}:{name}"
            assert Verifier.of(f"{prefix}_{name}").name == "exact_match"  # the stub's, not the fallback
    assert "reasoning_gym" in TASK_FAMILIES


def test_reasoning_gym_data_directory_gives_its_verifier(
    no_family_tasks: dict[str, Task], monkeypatch: pytest.MonkeyPatch, rg: Any
) -> None:
    """The README's command (--dataset_name reasoning_gym_chain_sum, in a fresh process): held-out accuracy is decided by
    reasoning-gym's scorer, not the strict integer rule it would fall back to."""
    verifier = Verifier.of("reasoning_gym_chain_sum")
    assert verifier.name == "reasoning_gym" and verifier.fn is resolve_reward("reasoning_gym")
    task = task_module.TASKS["reasoning_gym:chain_sum"]
    assert task.dataset == "reasoning_gym_chain_sum" and task.data_dir == DATA_DIR / "reasoning_gym_chain_sum"
    task.ensure_data(say=lambda line: None)  # (written on first use; gitignored)
    # A directory of data/ given as a path, relative (from the repository) or absolute, names the same task.
    monkeypatch.chdir(DATA_DIR.parent)
    for form in ("data/reasoning_gym_chain_sum", str(DATA_DIR / "reasoning_gym_chain_sum")):
        del task_module.TASKS["reasoning_gym:chain_sum"]
        found = task_of_dataset(form)
        assert found is not None and found.name == "reasoning_gym:chain_sum", form
    # The family's prefix alone is no task (not its member "").
    with pytest.raises(ValueError, match=r"unknown task 'reasoning_gym' \(known tasks: "):
        get_task("reasoning_gym")
    # Not a member, or not the family's prefix: the user's own directory, the strict integer rule.
    for other in (
        "reasoning_gym_no_such_set",
        "reasoning_gymchain_sum",
        "reasoning_gym-chain_sum",
        "reasoning_gym_",
    ):
        assert task_of_dataset(other) is None and Verifier.of(other).name == "accuracy", other


def test_a_committed_tasks_files_without_a_manifest_are_used_as_they_are(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task.ensure_data: a family's build without its manifest is unfinished and written again; a committed task's
    files without one are the user's (edited by hand, or from before manifests): never overwritten."""
    monkeypatch.setattr(task_module, "DATA_DIR", tmp_path)
    task = get_task("reverse")
    said: list[str] = []
    (tmp_path / "reverse").mkdir()
    mine = '{"prompt": "ab=", "answer": "ba", "id": 0}\n'
    (tmp_path / "reverse" / "train.jsonl").write_text(mine)
    task.ensure_data(say=said.append)
    assert sorted(p.name for p in (tmp_path / "reverse").iterdir()) == ["train.jsonl"] and not said
    assert (tmp_path / "reverse" / "train.jsonl").read_text() == mine
    (tmp_path / "reverse" / "train.jsonl").unlink()  # nothing there: written, with its manifest
    task.ensure_data(say=said.append)
    assert {p.name for p in (tmp_path / "reverse").iterdir()} >= {
        "train.jsonl",
        "test.jsonl",
        "manifest.json",
    }


# ------------------------------------------------------------------------- countdown's generator: no repeats


@cache
def _rows(name: str) -> tuple[dict, ...]:
    """Every row of a task's splits, built once for the tests below (a build is seeded; seconds for countdown)."""
    return tuple(r for split in get_task(name).build().values() for r in split)


@pytest.fixture(scope="module")
def countdown_rows() -> tuple[dict, ...]:
    return _rows("countdown")


@pytest.mark.slow
def test_countdown_problems_are_distinct_whatever_the_numbers_order(countdown_rows: tuple[dict, ...]) -> None:
    """The prompt lists the numbers in drawn order, but "2,37,95:116=" and "95,37,2:116=" are one problem: none
    twice, within a split or across train, validation and test."""
    keys = Counter((tuple(sorted(r["numbers"])), r["target"]) for r in countdown_rows)
    repeated = [k for k, n in keys.items() if n > 1]
    assert not repeated, repeated[:5]
    assert len(countdown_rows) == sum(countdown.SIZES.values())
    for r in countdown_rows[:500]:
        assert r["prompt"] == f"{','.join(map(str, r['numbers']))}:{r['target']}="


@pytest.mark.parametrize(
    "name, column, want",
    [
        ("countdown", lambda r: r["target"], set(range(1, 101))),  # TinyZero's targets, 1 to 100
        ("countdown", lambda r: len(r["numbers"]), {3, 4}),
        ("reverse", lambda r: len(r["answer"]), set(range(5, 13))),  # 5 to 12 letters
        ("addition_long", lambda r: len(str(r["a"])), set(range(3, 7))),  # 3- to 6-digit operands
        ("multiplication", lambda r: len(str(r["a"])), {2, 3}),
        ("chain_sum", lambda r: len(r["terms"]), set(range(2, 7))),  # reasoning-gym's default: 2 to 6 terms
        ("chain_sum", lambda r: len(str(max(r["terms"]))), set(range(1, 5))),  # of 1 to 4 digits
    ],
)
def test_generators_reach_every_value_their_doc_names(
    name: str, column: Callable[[dict], int], want: set[int]
) -> None:
    # Each generator's range, both ends reached: a range cut by one (range(1, 100)) changes the data silently, and the
    # comparison with the committed files goes once they are regenerated.
    assert {column(r) for r in _rows(name)} == want


def test_a_small_reasoning_gym_generator_gets_a_smaller_train_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generator with fewer distinct questions than the splits ask for: duplicates dropped (the first kept),
    validation and test whole, train what is left; below 1000 for train, a ValueError that says so."""
    from tinygrpo.data.tasks import reasoning_gym as adapter

    def fake(distinct: int) -> Any:
        def create_dataset(name: str, size: int, seed: int) -> list[dict]:
            return [
                {
                    "question": f"Add: {i % distinct} + 1 =",
                    "answer": str(i % distinct + 1),
                    "metadata": {"i": i},
                }
                for i in range(size)
            ]

        return type("FakeReasoningGym", (), {"create_dataset": staticmethod(create_dataset)})

    build = adapter.build_for.__wrapped__  # (not the cached one: the fake draws differ)
    monkeypatch.setattr(adapter, "_require", lambda: fake(3000))
    splits = build("fake")
    assert {k: len(v) for k, v in splits.items()} == {"validation": 500, "test": 500, "train": 2000}
    rows = [r for split in splits.values() for r in split]
    assert (
        len({r["prompt"] for r in rows}) == 3000 and rows[0]["prompt"] == "0="
    )  # (shared "Add: ", " + 1 =" gone)
    assert all(json.loads(r["entry"])["metadata"]["i"] < 3000 for r in rows)  # the first of each question
    monkeypatch.setattr(adapter, "_require", lambda: fake(1999))
    with pytest.raises(ValueError, match="only 1999 distinct questions, too few"):
        build("fake")


# ------------------------------------------------------------- reasoning-gym's prompts: the shared text goes


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(alphabet="abC:()", min_size=1, max_size=5), min_size=1, max_size=4),
    st.lists(st.text(alphabet="0123456789+- ", min_size=1, max_size=8), min_size=2, max_size=6, unique=True),
    st.sampled_from(["", " =", "?", " (an integer)"]),
)
def test_common_affixes_drop_the_whole_shared_instruction(
    words: list[str], bodies: list[str], tail: str
) -> None:
    from tinygrpo.data.tasks.reasoning_gym import _common_affixes

    head = " ".join(words) + " "  # an instruction every question repeats, then the question's own text
    texts = [head + b + tail for b in bodies]
    pre, suf = _common_affixes(texts)
    assert pre >= len(head)  # all of it dropped
    assert pre <= len(os.path.commonprefix(texts)) and texts[0][pre - 1] == " "  # shared, and no word split
    assert suf <= len(os.path.commonprefix([t[::-1] for t in texts])) and pre + suf <= min(map(len, texts))


AFFIXES = [
    # (questions, (prefix, suffix) dropped)
    (["Say: 1 + 2 =", "Say: 3 + 4 ="], (5, 2)),
    (["Sum 12", "Sum 13"], (4, 0)),  # the shared "1" is part of a word: kept
    (["abc", "abd"], (0, 0)),  # no whole word shared
    (["x y", "z y"], (0, 2)),
]


@pytest.mark.parametrize("texts, want", AFFIXES)
def test_common_affixes_table(texts: list[str], want: tuple[int, int]) -> None:
    from tinygrpo.data.tasks.reasoning_gym import _common_affixes

    assert _common_affixes(texts) == want


def test_reasoning_gym_prompts_share_no_word(rg: Any) -> None:
    """chain_sum's questions all begin "State the final answer to the following arithmetic problem: ": its prompts
    begin with the sum itself, and no two-word prefix is common to them all."""
    from tinygrpo.data.tasks.reasoning_gym import build_for

    rows = [r for split in build_for("chain_sum").values() for r in split]
    prompts = [r["prompt"] for r in rows]
    assert " " not in os.path.commonprefix(prompts)
    for r in rows[:200]:
        question = json.loads(r["entry"])["question"]
        assert question.startswith("State the final answer") and not r["prompt"].startswith("State")


# --------------------------------------------------------------------------- problem kinds at their boundaries


def _one(kinds: Callable[[dict[str, list]], dict[str, list[bool]]], **row: Any) -> set[str]:
    """The kinds one problem is of."""
    out = kinds({k: [v] for k, v in row.items()})
    return {k for k, member in out.items() if member[0]}


REVERSE_KINDS = [(n, {"short"} if n <= 8 else {"long"}) for n in range(5, 13)]


@pytest.mark.parametrize("n, want", REVERSE_KINDS)
def test_reverse_kinds(n: int, want: set[str]) -> None:
    # reverse.py: short is 5 to 8 letters, long 9 to 12; every word is exactly one of them.
    assert _one(reverse.kinds, answer="q" * n) == want


ADDITION_KINDS = [
    # (a, b, kinds)
    (9, 10, {"one_digit_operand"}),
    (10, 9, {"one_digit_operand"}),
    (10, 10, set()),
    (0, 0, {"one_digit_operand"}),
    (15, 15, {"carry"}),  # 5 + 5 = 10 carries
    (14, 15, set()),
    (19, 11, {"carry"}),
    (50, 50, {"sum_ge_100"}),
    (49, 50, set()),
    (55, 45, {"carry", "sum_ge_100"}),
    (99, 1, {"one_digit_operand", "carry", "sum_ge_100"}),
    (91, 9, {"one_digit_operand", "carry", "sum_ge_100"}),
]


@pytest.mark.parametrize("a, b, want", ADDITION_KINDS)
def test_addition_kinds(a: int, b: int, want: set[str]) -> None:
    assert _one(addition.row_kinds, a=a, b=b) == want


ADDITION_LONG_KINDS = [
    (100, 100, {"digits_3"}),
    (999, 100, {"digits_3", "sum_longer"}),
    (999, 1, {"digits_3", "sum_longer"}),
    (500, 499, {"digits_3"}),
    (1000, 999, {"digits_4"}),
    (9999, 1, {"digits_4", "sum_longer"}),
    (100, 10000, {"digits_5"}),
    (999999, 100, {"digits_6", "sum_longer"}),
    (100000, 999, {"digits_6"}),
]


@pytest.mark.parametrize("a, b, want", ADDITION_LONG_KINDS)
def test_addition_long_kinds(a: int, b: int, want: set[str]) -> None:
    assert _one(addition_long.kinds, a=a, b=b, answer=str(a + b)) == want


@pytest.mark.parametrize(
    "numbers, want",
    [([1, 2, 3], {"numbers_3"}), ([1, 2, 3, 4], {"numbers_4"}), ([5, 5, 5, 5], {"numbers_4"})],
)
def test_countdown_kinds(numbers: list[int], want: set[str]) -> None:
    assert _one(countdown.kinds, numbers=numbers) == want


@pytest.mark.parametrize("a, want", [(10, {"2x2"}), (99, {"2x2"}), (100, {"3x2"}), (999, {"3x2"})])
def test_multiplication_kinds(a: int, want: set[str]) -> None:
    assert _one(multiplication.kinds, a=a, b=37) == want


FORMATS = [
    ("1776<eos>", "direct"),
    ("1776", "direct"),  # cut off: still the answer alone
    ("0<eos>", "direct"),
    ("-129<eos>", "direct"),  # a negative answer alone (chain_sum)
    ("-<eos>", "other"),
    ("-06000,-92100=-129<eos>", "scratchpad"),
    ("37*8=296,37*40=1480,296+1480=1776<eos>", "scratchpad"),
    ("37*8=29", "scratchpad"),  # work begun, cut off
    ("=1776<eos>", "scratchpad"),
    ("37*8<eos>", "other"),  # a product begun and not finished
    ("17,76<eos>", "other"),  # a stray comma
    ("<eos>", "other"),
    ("", "other"),
]


@pytest.mark.parametrize("completion, want", FORMATS)
def test_multiplication_completion_format(completion: str, want: str) -> None:
    assert multiplication.completion_format(completion) == want
    assert want in multiplication.FORMATS.names


def test_every_task_with_kinds_puts_each_problem_in_one_kind() -> None:
    # Where the kinds partition the problems (reverse: by length; countdown: by count; multiplication: by digits;
    # addition_long: by the longer operand), every problem is in exactly one of those kinds.
    partitions = {
        "reverse": ("short", "long"),
        "countdown": ("numbers_3", "numbers_4"),
        "multiplication": ("2x2", "3x2"),
        "addition_long": tuple(f"digits_{d}" for d in addition_long.DIGITS),
        "chain_sum": tuple(f"terms_{n}" for n in range(2, 7)),
    }
    for name, parts in partitions.items():
        rows = _rows(name)
        kinds = get_task(name).kinds({c: [r[c] for r in rows] for c in rows[0]})
        for i in range(len(rows)):
            assert sum(kinds[p][i] for p in parts) == 1, (name, rows[i])


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="-+0123456789 ", max_size=6), gold=st.integers(-9999, 9999))
def test_reversed_answer_scores_only_its_own_format(text: str, gold: int) -> None:
    """A reversed answer is digits alone, read backwards: any other text scores 0, also one that `accuracy` would
    take for the answer in the usual order (a signed '-4912<eos>' for -4912)."""
    from rewards import reversed_answer

    score = reversed_answer([text + EOS], [str(gold)])[0]
    right = (
        text.isdigit() and text.isascii() and str(int(text[::-1])) == text[::-1] and int(text[::-1]) == gold
    )
    assert score == (1.0 if right else 0.0), (text, gold, score)
    assert reversed_answer([f"{-abs(gold) or -1}{EOS}"], [str(-abs(gold) or -1)]) == [0.0]
