"""The built-in verifiers remember what they scored (rewards/builtin.py, `_SCORES`): a batch scored with what earlier
batches left in the memo gives what each sample scored alone from an empty one gives, and, for the integer readers,
what an independent reading (Python's int) gives; the memo is per pattern, bounded, and never hides an error."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rewards.builtin as builtin
from rewards._constants import EOS

VERIFIERS = {
    "accuracy": builtin.accuracy,
    "accuracy_lenient": builtin.accuracy_lenient,
    "final_answer": builtin.final_answer,
    "tool_answer": builtin.tool_answer,
}

completions = st.builds(
    lambda body, end: body + end,
    st.text(alphabet="-+0123456789=<> ", max_size=6),
    st.sampled_from([EOS, "", "x", EOS + "1"]),
)
golds = st.integers(-120, 120) | st.integers(-120, 120).map(str) | st.sampled_from([" 7 ", "007", "-0", "+5"])


def _strict_oracle(completion: str, gold: int | str) -> float:
    """`accuracy` read another way: the whole text is an integer as written, then <eos>; compared as Python ints."""
    m = re.fullmatch(r"(-?)([0-9]+)" + re.escape(EOS), completion)
    if m is None or (len(m.group(2)) > 1 and m.group(2)[0] == "0") or m.group(0).startswith("-0"):
        return 0.0
    return float(int(m.group(1) + m.group(2)) == int(str(gold).strip()))


def _lenient_oracle(completion: str, gold: int | str) -> float:
    m = re.search(r"[+-]?[0-9]+", completion, re.ASCII)
    return float(m is not None and int(m.group(0)) == int(str(gold).strip()))


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(st.tuples(completions, golds), min_size=1, max_size=24))
def test_a_remembered_score_is_the_score(batch):
    comps, answer = [c for c, _ in batch], [g for _, g in batch]
    for name, fn in VERIFIERS.items():
        alone = []
        for c, g in batch:  # each sample from an empty memo: nothing remembered can answer
            builtin._SCORES.clear()
            alone += fn([c], [g])
        builtin._SCORES.clear()
        assert fn(comps, answer) == alone, name  # (repeats within the batch answered from the memo)
        assert fn(comps, answer) == alone, name  # every sample answered from the memo
    # and the memo's answers are the right ones, read independently for the integer readers
    assert builtin.accuracy(comps, answer) == [_strict_oracle(c, g) for c, g in batch]
    assert builtin.accuracy_lenient(comps, answer) == [_lenient_oracle(c, g) for c, g in batch]


def test_each_verifier_and_eos_has_its_own_memory():
    builtin._SCORES.clear()
    samples = (["085" + EOS, "<3*3=9>9" + EOS, "2*2=4" + EOS], [85, 9, "4"])
    want = {
        "accuracy_lenient": [1.0, 0.0, 0.0],  # leading zeros tolerated; the first integer is read (3, 2)
        "accuracy": [0.0, 0.0, 0.0],
        "tool_answer": [0.0, 1.0, 0.0],
        "final_answer": [0.0, 0.0, 1.0],
    }
    for _ in range(2):  # the second pass: every answer from the memo
        for name, scores in want.items():
            assert VERIFIERS[name](*samples) == scores, name
    # the same text under another <eos> is another question
    assert builtin.accuracy(["85|"], [85], eos="|") == [1.0]
    assert builtin.accuracy(["85|"], [85]) == [0.0]


def test_the_memory_is_bounded_and_a_full_one_starts_over(monkeypatch):
    monkeypatch.setattr(builtin, "_SCORES_MAX", 8)
    builtin._SCORES.clear()
    for n in range(100):
        assert builtin.accuracy([f"{n}{EOS}", f"{n + 1}{EOS}"], [n, n]) == [1.0, 0.0]
        assert len(builtin._SCORES) <= 8


def test_an_error_is_raised_every_time_never_remembered():
    builtin._SCORES.clear()
    assert builtin.accuracy(["85" + EOS], ["85"]) == [1.0]
    for _ in range(2):
        with pytest.raises(TypeError, match="plain-text completion"):
            builtin.accuracy([85], ["85"])  # (the same value, not as text)
        with pytest.raises(ValueError, match="is not an integer"):
            builtin.accuracy(["85" + EOS], ["eighty-five"])
    assert builtin.accuracy(["85" + EOS, "1" + EOS], [None, 1]) == [None, 1.0]  # no gold: not applicable
