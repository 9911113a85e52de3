"""Tests for rewards/: verifier tables, resolution, the calling convention and validation."""

from __future__ import annotations

import asyncio
import importlib
import math
import os
import pickle
import subprocess
import sys
import uuid
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import rewards
from rewards import (
    EOS,
    REWARD_REGISTRY,
    RewardError,
    RewardResolutionError,
    check_binary,
    combine_rewards,
    compute_rewards,
    list_rewards,
    make_accuracy,
    make_length_penalty,
    resolve_reward,
    resolve_rewards,
    reward_metrics,
    rewards_float32,
)

BIG = "123456789012345678901234567890"  # 30 digits: beyond int64 / exact float range
BIG_PLUS_1 = str(int(BIG) + 1)


def score(spec, completions, answers=None, **extra):
    """Score completions with one reward through the real calling path (compute_rewards)."""
    fn = resolve_reward(spec)
    columns = {"answer": list(answers)} if answers is not None else {}
    ids = [[0] * len(c) for c in completions]
    out = compute_rewards([fn], ["r"], ["37+48="] * len(completions), completions, ids, columns, extra)
    return out[:, 0].tolist()


# --------------------------------------------------------------------------- verifier tables

ACCURACY_CASES = [
    # (completion, gold, expected, why)
    ("85<eos>", "85", 1.0, "canonical integer + eos, correct"),
    ("85<eos>", 85, 1.0, "gold may be an int"),
    ("85<eos>", " 85 ", 1.0, "gold string whitespace is ignored"),
    ("84<eos>", "85", 0.0, "well-formed but wrong"),
    ("085<eos>", "85", 0.0, "leading zero is not canonical"),
    ("0<eos>", "0", 1.0, "a lone zero is canonical"),
    ("00<eos>", "0", 0.0, "repeated zero is a leading zero"),
    ("8 5<eos>", "85", 0.0, "inner space"),
    (" 85<eos>", "85", 0.0, "leading space"),
    ("85 <eos>", "85", 0.0, "space before eos"),
    ("85+1<eos>", "85", 0.0, "trailing junk before eos"),
    ("", "85", 0.0, "empty completion"),
    ("<eos>", "85", 0.0, "eos only, no digits"),
    ("-0<eos>", "0", 0.0, "-0 is zero written wrong"),
    ("+85<eos>", "85", 0.0, "explicit plus sign not allowed"),
    ("-85<eos>", "-85", 1.0, "a negative integer as written (chain_sum's answers)"),
    ("-85<eos>", -85, 1.0, "a negative int gold"),
    ("-85<eos>", "85", 0.0, "a minus makes it another integer"),
    ("85<eos>", "-85", 0.0, "a minus dropped"),
    ("-085<eos>", "-85", 0.0, "a leading zero after the minus"),
    ("--85<eos>", "85", 0.0, "two minuses"),
    ("- 85<eos>", "-85", 0.0, "a space after the minus"),
    ("+-85<eos>", "-85", 0.0, "two signs"),
    ("85", "85", 0.0, "truncated: no eos (ran into max length)"),
    ("8555", "85", 0.0, "truncated run-on"),
    ("85<eos>85", "85", 0.0, "junk after eos"),
    ("85<eos><eos>", "85", 0.0, "doubled eos"),
    ("85<eos>\n", "85", 0.0, "trailing newline: fullmatch, not $"),
    ("８５<eos>", "85", 0.0, "fullwidth unicode digits are not ASCII digits"),
    ("٨٥<eos>", "85", 0.0, "Arabic-Indic digits are not ASCII digits"),
    ("85<EOS>", "85", 0.0, "eos marker is case-sensitive"),
    (BIG + "<eos>", BIG, 1.0, "30-digit number compared exactly"),
    (BIG_PLUS_1 + "<eos>", BIG, 0.0, "30-digit number off by one"),
    (BIG + "<eos>", int(BIG), 1.0, "30-digit int gold"),
]


@pytest.mark.parametrize(("completion", "gold", "expected", "why"), ACCURACY_CASES)
def test_accuracy_strict(completion, gold, expected, why):
    assert score("accuracy", [completion], [gold]) == [expected], why


LENIENT_CASES = [
    ("85<eos>", "85", 1.0, "plain correct answer"),
    ("085<eos>", "85", 1.0, "leading zeros compare as integers"),
    ("+85<eos>", "85", 1.0, "plus sign tolerated"),
    ("-0<eos>", "0", 1.0, "-0 == 0 as integers"),
    ("-85<eos>", "85", 0.0, "minus sign makes it a different integer"),
    ("85", "85", 1.0, "missing eos tolerated"),
    ("85+1<eos>", "85", 1.0, "first integer is 85"),
    ("the answer is 85<eos>", "85", 1.0, "text around the number"),
    ("8 5<eos>", "85", 0.0, "first integer is 8"),
    ("<eos>85", "85", 1.0, "first integer anywhere, even after eos"),
    ("", "85", 0.0, "no integer at all"),
    ("<eos>", "85", 0.0, "no integer at all"),
    ("８５<eos>", "85", 0.0, "non-ASCII digits are never integers"),
    (BIG_PLUS_1, BIG, 0.0, "30-digit off by one"),
    ("0" + BIG + "<eos>", BIG, 1.0, "30 digits with a leading zero"),
]


@pytest.mark.parametrize(("completion", "gold", "expected", "why"), LENIENT_CASES)
def test_accuracy_lenient(completion, gold, expected, why):
    assert score("accuracy_lenient", [completion], [gold]) == [expected], why
    assert make_accuracy(strict=False)(completions=[completion], answer=[gold]) == [expected], why


FORMAT_CASES = [
    ("85<eos>", 1.0, "digits then eos"),
    ("12<eos>", 1.0, "wrong answers are still well-formed"),
    ("085<eos>", 1.0, "leading zeros allowed by the format rule"),
    ("0<eos>", 1.0, "single digit"),
    ("<eos>", 0.0, "needs at least one digit"),
    ("", 0.0, "empty"),
    ("85", 0.0, "truncated: no eos"),
    ("85<eos>1", 0.0, "junk after eos"),
    ("-85<eos>", 0.0, "sign not allowed"),
    ("8 5<eos>", 0.0, "space not allowed"),
    ("８５<eos>", 0.0, "non-ASCII digits"),
]


@pytest.mark.parametrize(("completion", "expected", "why"), FORMAT_CASES)
def test_format(completion, expected, why):
    assert score("format", [completion]) == [expected], why


DIGIT_CASES = [
    ("85<eos>", "85", 1.0, "exactly right"),
    ("86<eos>", "85", 0.5, "tens right, units wrong"),
    ("75<eos>", "85", 0.5, "units right, tens wrong"),
    ("5<eos>", "85", 0.5, "units aligned from the right; denominator is the longer length"),
    ("185<eos>", "85", 2 / 3, "extra leading digit costs a position"),
    ("085<eos>", "85", 2 / 3, "leading zero counted as a (wrong) digit"),
    ("85<eos>", "085", 1.0, "gold is canonicalised to 85"),
    ("58<eos>", "85", 0.0, "no digit in the right place"),
    ("100<eos>", "99", 0.0, "carry error: nothing aligned matches"),
    ("109<eos>", "99", 1 / 3, "units match only"),
    ("85", "85", 0.0, "truncated: not well-formed"),
    ("85+1<eos>", "85", 0.0, "not well-formed"),
    ("<eos>", "85", 0.0, "no digits"),
    (BIG + "<eos>", BIG, 1.0, "30 digits exact"),
    (BIG_PLUS_1 + "<eos>", BIG, 29 / 30, "30 digits, last differs"),
]


@pytest.mark.parametrize(("completion", "gold", "expected", "why"), DIGIT_CASES)
def test_digit_match(completion, gold, expected, why):
    assert score("digit_match", [completion], [gold]) == pytest.approx([expected]), why


LENGTH_CASES = [
    # (n tokens, L, cache, expected, why)
    (0, 8, None, 0.0, "empty completion: no penalty"),
    (6, 8, None, 0.0, "default cache L//4 = 2: n <= L - cache is free"),
    (7, 8, None, -0.5, "inside the cache window: (6 - 7) / 2"),
    (8, 8, None, -1.0, "hit the limit exactly: (6 - 8) / 2"),
    (9, 8, None, -1.0, "beyond the limit"),
    (3, 3, None, -1.0, "tiny L: cache is max(1, L//4) = 1"),
    (2, 3, None, 0.0, "tiny L, below the window"),
    (15, 20, 5, 0.0, "explicit cache 5, boundary L - cache"),
    (16, 20, 5, -0.2, "(15 - 16) / 5"),
    (18, 20, 4, -0.5, "(16 - 18) / 4"),
    (20, 20, 20, -1.0, "cache == L is allowed"),
]


@pytest.mark.parametrize(("n", "length", "cache", "expected", "why"), LENGTH_CASES)
def test_length_penalty(n, length, cache, expected, why):
    fn = resolve_reward("length_penalty") if cache is None else make_length_penalty(cache)
    out = compute_rewards([fn], ["len"], ["p"], ["x" * n], [[1] * n], {}, {"max_completion_length": length})
    assert out[0, 0] == pytest.approx(expected), why


def test_length_penalty_matches_trl_formula_and_fixed_length():
    fixed = make_length_penalty(soft_punish_cache=20, max_completion_length=100)
    # TRL's get_soft_overlong_punishment docstring example, plus both boundaries.
    assert fixed(completion_ids=[[1] * 90, [1] * 80, [1] * 101]) == [-0.5, 0.0, -1.0]
    with pytest.raises(ValueError, match="soft_punish_cache"):
        make_length_penalty(0, max_completion_length=10)
    with pytest.raises(RewardError, match="needs argument 'max_completion_length'"):
        compute_rewards([resolve_reward("length_penalty")], ["len"], ["p"], ["x"], [[1]], {}, {})


def test_custom_eos_keyword_is_honoured():
    assert score("accuracy", ["85</s>", "85<eos>"], ["85", "85"], eos="</s>") == [1.0, 0.0]
    assert score("format", ["85</s>"], eos="</s>") == [1.0]


def test_none_gold_answer_is_not_applicable():
    assert math.isnan(score("accuracy", ["85<eos>"], [None])[0])


# --------------------------------------------------------------------------- resolution


def test_builtins_registered_and_listed():
    names = list_rewards()
    for name in ("accuracy", "accuracy_lenient", "format", "digit_match", "length_penalty"):
        assert name in names and names[name]
    assert EOS == "<eos>"


def test_resolve_by_name_and_module_path():
    assert resolve_reward("accuracy") is rewards.accuracy
    assert resolve_reward("rewards.builtin:accuracy") is rewards.accuracy
    assert resolve_reward("rewards.builtin:format_reward") is REWARD_REGISTRY["format"]


def test_resolve_module_on_sys_path(tmp_path, monkeypatch):
    mod = f"user_rewards_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text("def half(completions, **kw):\n    return [0.5] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert score(f"{mod}:half", ["1<eos>"]) == [0.5]
    finally:
        sys.modules.pop(mod, None)


def test_resolve_file_path(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text("def ones(completions, answer):\n    return [1.0 for _ in completions]\n")
    fn = resolve_reward(f"{path}:ones")
    assert fn.__name__ == "ones"
    assert score(f"{path}:ones", ["x", "y"], ["1", "2"]) == [1.0, 1.0]
    assert resolve_reward(f"{path}:ones") is fn  # loaded once, not re-executed
    # A file of the package itself resolves to the already-imported module (no double registration).
    builtin_file = Path(rewards.__file__).parent / "builtin.py"
    assert resolve_reward(f"{builtin_file}:accuracy") is rewards.accuracy


def _registry_cleanup(names):
    for name in names:
        REWARD_REGISTRY.pop(name, None)


@pytest.fixture
def reward_dir(tmp_path):
    """A scratch directory of reward modules; registrations made from it are removed afterwards."""
    before = set(REWARD_REGISTRY)
    yield tmp_path
    _registry_cleanup(set(REWARD_REGISTRY) - before)


DROPIN = """
from rewards import register_reward

@register_reward("{name}")
def reward(completions, **kwargs):
    \"\"\"Drop-in test reward.\"\"\"
    return [0.25] * len(completions)
"""


def test_dropped_in_file_found_by_name_in_search_dir(reward_dir):
    name = f"dropin_{uuid.uuid4().hex[:8]}"
    (reward_dir / "custom.py").write_text(DROPIN.format(name=name))
    (reward_dir / "_private.py").write_text("raise RuntimeError('underscore files are skipped')\n")
    assert resolve_reward(name, search_dirs=[reward_dir])(completions=["a"]) == [0.25]
    assert name in list_rewards(search_dirs=[reward_dir])


@pytest.fixture
def real_dir_dropin():
    """Write a reward module into the real rewards/ package directory, and remove every trace after."""
    stem = f"zz_test_dropin_{uuid.uuid4().hex[:8]}"
    path = Path(rewards.__file__).parent / f"{stem}.py"
    path.write_text(DROPIN.format(name=stem))
    try:
        yield stem
    finally:
        path.unlink(missing_ok=True)
        for pyc in (path.parent / "__pycache__").glob(f"{stem}.*.pyc"):
            pyc.unlink(missing_ok=True)
        sys.modules.pop(f"rewards.{stem}", None)
        REWARD_REGISTRY.pop(stem, None)


def test_dropped_in_file_found_by_name_in_real_package_dir(real_dir_dropin):
    fn = resolve_reward(real_dir_dropin)
    assert fn.__module__ == f"rewards.{real_dir_dropin}"
    assert score(real_dir_dropin, ["85<eos>"]) == [0.25]


def test_broken_user_file_does_not_break_builtins(reward_dir):
    (reward_dir / "broken.py").write_text("import definitely_not_a_module_xyz\n")
    good = f"good_{uuid.uuid4().hex[:8]}"
    (reward_dir / "good.py").write_text(DROPIN.format(name=good))
    assert resolve_reward("accuracy", search_dirs=[reward_dir]) is rewards.accuracy
    assert resolve_reward(good, search_dirs=[reward_dir])(completions=["x"]) == [0.25]
    with pytest.raises(
        RewardResolutionError, match=r"unknown reward 'nope'.*broken\.py.*ModuleNotFoundError"
    ):
        resolve_reward("nope", search_dirs=[reward_dir])


RESOLUTION_ERRORS = [
    ("no_such_reward", r"unknown reward 'no_such_reward'; registered: .*accuracy", "unknown name"),
    (
        "no_such_pkg_xyz.mod:fn",
        r"cannot import module 'no_such_pkg_xyz.mod'.*ModuleNotFoundError",
        "bad module",
    ),
    ("rewards.builtin:nope", r"module 'rewards.builtin' has no function 'nope'", "missing attribute"),
    ("rewards.builtin:EOS", r"'EOS' .* is a str, not a callable", "not callable"),
    ("missing/file.py:fn", r"reward file 'missing/file.py' not found", "missing file"),
    ("some_file.py", r"names a file but no function", "file without :function"),
]


@pytest.mark.parametrize(("spec", "pattern", "why"), RESOLUTION_ERRORS)
def test_resolution_errors(spec, pattern, why):
    with pytest.raises(RewardResolutionError, match=pattern):
        resolve_reward(spec)


def test_missing_function_in_file_and_file_raising(tmp_path):
    path = tmp_path / "r.py"
    path.write_text("def other(completions):\n    return [0.0]\n")
    with pytest.raises(RewardResolutionError, match=r"has no function 'accuracy' \(callables there: other\)"):
        resolve_reward(f"{path}:accuracy")
    bad = tmp_path / "bad.py"
    bad.write_text("1 / 0\n")
    with pytest.raises(RewardResolutionError, match=r"cannot load reward file .*ZeroDivisionError"):
        resolve_reward(f"{bad}:f")


def test_resolve_rewards_names_and_weights(tmp_path):
    path = tmp_path / "acc.py"
    path.write_text("def accuracy(completions, **kw):\n    return [0.0] * len(completions)\n")
    funcs, names, weights = resolve_rewards(["accuracy", "format", f"{path}:accuracy"], None)
    assert names == ["accuracy", "format", "accuracy_2"]  # duplicate display names made unique
    assert weights == [1.0, 1.0, 1.0] and funcs[0] is rewards.accuracy
    assert resolve_rewards(["accuracy", "format"], [1, 0.5])[2] == [1.0, 0.5]
    with pytest.raises(RewardResolutionError, match="got 1 reward weights for 2 rewards"):
        resolve_rewards(["accuracy", "format"], [1.0])
    with pytest.raises(RewardResolutionError, match="finite"):
        resolve_rewards(["accuracy"], [float("nan")])
    with pytest.raises(RewardResolutionError, match="no reward functions"):
        resolve_rewards([], None)


def test_register_conflict_is_an_error():
    def other(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match="already registered"):
        rewards.register_reward("accuracy")(other)
    with pytest.raises(ValueError, match="invalid reward name"):
        rewards.register_reward("a:b")


def test_cli_list():
    out = subprocess.run(
        [sys.executable, "-m", "rewards", "list"],
        cwd=Path(rewards.__file__).parent.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "accuracy " in out and "length_penalty" in out and "DAPO" in out


# --------------------------------------------------------------------------- calling convention


def run(funcs, completions=("85<eos>", "12<eos>"), answers=("85", "85"), extra=None):
    completions = list(completions)
    return compute_rewards(
        list(funcs),
        [getattr(f, "__name__", "f") for f in funcs],
        ["37+48="] * len(completions),
        completions,
        [[1] * len(c) for c in completions],
        {"prompt": ["37+48="] * len(completions), "answer": list(answers), "a": [37] * len(completions)},
        {"max_completion_length": 8, "eos": EOS} if extra is None else extra,
    )


def test_trl_style_functions_plug_in_unchanged():
    def trl_style(completions, **kwargs):
        # TRL passes everything by keyword; "prompt" is dropped like TRL does.
        assert set(kwargs) == {"prompts", "completion_ids", "answer", "a", "max_completion_length", "eos"}
        return [float(c.startswith(a)) for c, a in zip(completions, kwargs["answer"], strict=True)]

    def keyword_only(*, prompts, completions, answer, **kwargs):
        return [1.0 if c == a + EOS else 0.0 for c, a in zip(completions, answer, strict=True)]

    out = run([trl_style, keyword_only])
    assert out.tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_builtins_accept_trls_call_unchanged():
    # The reverse direction: TRL calls with every keyword it has, including ones we never pass.
    trl_kwargs = {"trainer_state": None, "log_extra": None, "log_metric": None}
    common = {
        "prompts": ["1+1="] * 2,
        "completions": ["2<eos>", "3<eos>"],
        "completion_ids": [[1, 2], [1, 2]],
    }
    assert rewards.accuracy(**common, answer=["2", "2"], **trl_kwargs) == [1.0, 0.0]
    assert rewards.digit_match(**common, answer=["2", "2"], **trl_kwargs) == [1.0, 0.0]
    assert rewards.format_reward(**common, **trl_kwargs) == [1.0, 1.0]
    fixed = make_length_penalty(1, max_completion_length=2)
    assert fixed(**common, **trl_kwargs) == [-1.0, -1.0]
    assert pickle.loads(pickle.dumps(fixed))(**common) == [-1.0, -1.0]  # picklable, like TRL's own


def test_trl_library_reward_plugs_in_unchanged():
    # CI installs .[test]: there a missing trl fails, it never skips
    trl_rewards = (
        importlib.import_module("trl.rewards") if os.environ.get("CI") else pytest.importorskip("trl.rewards")
    )
    soft = trl_rewards.get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=2)
    ours = make_length_penalty(2)
    out = run([soft, ours], completions=["1<eos>", "1234567", "12345678"], answers=["1"] * 3)
    assert out[:, 0].tolist() == out[:, 1].tolist() == [0.0, -0.5, -1.0]


def test_signature_filtering_without_kwargs():
    seen = {}

    def plain(prompts, completions, completion_ids, answer):
        seen["called"] = True
        return [1.0] * len(completions)

    def positional_only(completions, /, a, eos="?"):
        assert eos == EOS and a == [37, 37]
        return [2.0] * len(completions)

    def optional_missing(completions, bonus=0.5):
        return [bonus] * len(completions)

    assert run([plain, positional_only, optional_missing]).tolist() == [[1.0, 2.0, 0.5]] * 2
    assert seen["called"]


def test_missing_required_parameter_names_function_and_parameter():
    def needs_gold(completions, gold):
        return [0.0] * len(completions)

    with pytest.raises(RewardError, match=r"reward 'needs_gold' needs argument 'gold'.*available: a, answer"):
        run([needs_gold])


def test_async_rewards_are_awaited_concurrently():
    order = []

    async def slow(completions, **kwargs):
        order.append("slow start")
        await asyncio.sleep(0.01)
        order.append("slow end")
        return [1.0] * len(completions)

    async def fast(completions, **kwargs):
        order.append("fast start")
        return [0.5] * len(completions)

    out = run([slow, rewards.accuracy, fast])
    assert out.tolist() == [[1.0, 1.0, 0.5], [1.0, 0.0, 0.5]]
    assert order.index("fast start") < order.index("slow end")  # same event loop, gathered


def test_async_rewards_inside_running_event_loop():
    async def areward(completions, **kwargs):
        return [0.25] * len(completions)

    async def caller():
        return run([areward])

    assert asyncio.run(caller()).tolist() == [[0.25], [0.25]]


def test_result_types_accepted():
    def mixed(completions, **kwargs):
        return [True, np.float32(0.5)]

    def array(completions, **kwargs):
        return np.array([1, 2])

    def exotic(completions, **kwargs):
        return (Fraction(1, 4), np.int64(3))

    assert run([mixed, array, exotic]).tolist() == [[1.0, 1.0, 0.25], [0.5, 2.0, 3.0]]


# --------------------------------------------------------------------------- validation errors


def _returning(value):
    def bad(completions, **kwargs):
        return value

    return bad


def _raising(completions, **kwargs):
    raise KeyError("answer missing")


async def _async_raising(completions, **kwargs):
    raise RuntimeError("remote verifier down\nsecond line")


VALIDATION_ERRORS = [
    (_returning([1.0]), r"reward 'bad' returned 1 values for 2 samples", "wrong length"),
    (_returning(None), r"reward 'bad' returned NoneType, expected a list of 2 floats", "not a list"),
    (_returning("10"), r"reward 'bad' returned str", "string is not a list"),
    (_returning({0: 1.0, 1: 1.0}), r"returned dict", "mapping is not a list"),
    (_returning(np.zeros((2, 1))), r"array of shape \(2, 1\)", "2-D array"),
    (_returning([1.0, "1"]), r"non-number '1' \(str\) for sample 1 \(completion '12<eos>'\)", "string value"),
    (_returning([1.0, 1j]), r"non-number 1j \(complex\) for sample 1", "complex value"),
    (_returning([1.0, math.nan]), r"reward 'bad' returned NaN for sample 1 \(completion '12<eos>'\)", "NaN"),
    (_returning([math.inf, 0.0]), r"returned infinity for sample 0 \(completion '85<eos>'\)", "inf"),
    (_returning([0.0, -math.inf]), r"returned -infinity for sample 1", "-inf"),
    (_returning([10**400, 0.0]), r"returned infinity for sample 0", "int too large for a float"),
    (_raising, r"reward '_raising' raised KeyError: 'answer missing'", "function raises"),
    (
        _async_raising,
        r"reward '_async_raising' raised RuntimeError: remote verifier down$",
        "async raises; one line",
    ),
]


@pytest.mark.parametrize(("fn", "pattern", "why"), VALIDATION_ERRORS)
def test_validation_errors(fn, pattern, why):
    with pytest.raises(RewardError, match=pattern) as info:
        run([fn])
    assert "\n" not in str(info.value), why
    assert isinstance(info.value, ValueError)


def test_bad_batch_inputs():
    with pytest.raises(ValueError, match="column 'answer' has 1 entries for 2 samples"):
        run([rewards.format_reward], answers=["85"])
    with pytest.raises(ValueError, match="2 reward functions but 1 names"):
        compute_rewards([rewards.accuracy, rewards.format_reward], ["a"], [], [], [], {}, {})
    with pytest.raises(ValueError, match="clashes"):
        compute_rewards(
            [rewards.format_reward], ["f"], ["p"], ["1<eos>"], [[1]], {"eos": ["x"]}, {"eos": EOS}
        )


# --------------------------------------------------------------------------- combining and metrics


def test_none_handling_combine_and_metrics():
    def only_first(completions, **kwargs):
        return [1.0, None, None]

    def sometimes(completions, **kwargs):
        return [0.5, 0.25, None]

    per_func = run([only_first, sometimes], completions=["1", "2", "3"], answers=["1", "2", "3"])
    assert np.isnan(per_func[1:, 0]).all() and np.isnan(per_func[2, 1])
    combined = combine_rewards(per_func, [1.0, 2.0])
    assert combined[:2].tolist() == [2.0, 0.5]  # None excluded from the sum
    assert math.isnan(combined[2])  # every function returned None
    metrics = reward_metrics(per_func, ["only_first", "sometimes"])
    assert metrics["rewards/only_first/mean"] == 1.0
    assert metrics["rewards/only_first/std"] == 0.0  # single value: no NaN
    assert metrics["rewards/only_first/frac_none"] == pytest.approx(2 / 3)
    assert metrics["rewards/sometimes/mean"] == pytest.approx(0.375)
    assert metrics["rewards/sometimes/std"] == pytest.approx(np.std([0.5, 0.25], ddof=1))


def test_metrics_all_none_are_nan_free():
    per_func = np.full((4, 1), np.nan)
    metrics = reward_metrics(per_func, ["x"])
    assert metrics == {"rewards/x/mean": 0.0, "rewards/x/std": 0.0, "rewards/x/frac_none": 1.0}
    assert np.isnan(combine_rewards(per_func, [1.0])).all()


def test_combine_torch_and_weight_errors():
    torch = pytest.importorskip("torch")
    per_func = torch.tensor([[1.0, float("nan")], [float("nan"), float("nan")]], dtype=torch.float32)
    out = combine_rewards(per_func, [0.5, 2.0])
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out[0].item() == 0.5 and torch.isnan(out[1])
    with pytest.raises(ValueError, match="got 1 weights for 2 reward functions"):
        combine_rewards(per_func, [1.0])


# ------------------------------------------------------------------------------------------------ as a trainer keeps them


def test_rewards_float32_is_the_trainers_cast_and_refuses_what_does_not_fit():
    per_func = np.array([[1.0, 0.1], [0.0, math.nan], [math.nan, math.nan]])
    per32, total = rewards_float32(per_func, [1.0, 2.0], ["a", "b"], ["x", "y", "z"])
    assert per32.dtype == np.float32 and total.dtype == np.float32
    assert np.array_equal(per32, per_func.astype(np.float32), equal_nan=True)
    want = combine_rewards(per_func.astype(np.float32), [1.0, 2.0]).astype(np.float32)
    assert np.array_equal(total, want, equal_nan=True)
    edge = np.array([[3.4e38], [-3.4e38]])  # the largest float32 is ~3.403e38: these fit
    assert np.isfinite(rewards_float32(edge, [1.0], ["a"], ["x", "y"])[1]).all()
    with pytest.raises(RewardError) as e:
        rewards_float32(np.array([[0.0], [-1e39]]), [1.0], ["a"], ["x", "y"])
    assert str(e.value) == (
        "reward 'a' returned -1e+39 for sample 1 (completion 'y'), which does not fit float32 (at most 3.4e+38 in size)"
    )
    with pytest.raises(RewardError) as e:  # each fits, their weighted sum does not (b returned None)
        rewards_float32(np.array([[3e38, math.nan]]), [2.0, 1.0], ["a", "b"], ["x"])
    assert str(e.value).startswith(
        "the weighted reward 2 x 'a' is 6e+38 for sample 0 (completion 'x'), which"
    )
    with pytest.raises(RewardError) as e:
        rewards_float32(np.array([[3e38, 3e38]]), [1.0, 1.0], ["a", "b"], ["x"])
    assert str(e.value).startswith("the weighted sum 1 x 'a' + 1 x 'b' is 6e+38 for sample 0")


def test_check_binary_admits_0_1_and_none_and_names_what_is_not():
    per_func = np.array([[1.0], [0.0], [math.nan]])
    check_binary(combine_rewards(per_func, [1.0]), per_func, [1.0], ["acc"], ["a", "b", "c"], "pass@k")
    per_func = np.array([[1.0, 0.0], [1.0, 1.0]])
    with pytest.raises(RewardError) as e:
        check_binary(
            combine_rewards(per_func, [1.0, 1.0]), per_func, [1.0, 1.0], ["acc", "fmt"], ["a", "b"], "pass@k"
        )
    assert str(e.value) == (
        "pass@k needs rewards of 0 or 1 (or None), but the weighted sum 1 x 'acc' + 1 x 'fmt' gave 2 for sample 1 "
        "(completion 'b')"
    )


# ---------------------------------------------------------------------------------------------------------------
# a reward that changes what it was given


MUTATIONS = {
    "clear": lambda xs: xs.clear(),
    "pop": lambda xs: xs.pop(),
    "append": lambda xs: xs.append(xs[0]),
    "sort": lambda xs: xs.sort(reverse=True),
    "assign": lambda xs: xs.__setitem__(0, xs[-1]),
    "reverse": lambda xs: xs.reverse(),
}


@pytest.mark.parametrize("how", sorted(MUTATIONS))
@pytest.mark.parametrize("arg", ["prompts", "completions", "completion_ids", "answer"])
@pytest.mark.parametrize("is_async", [False, True])
def test_a_reward_that_changes_a_list_it_was_given_is_told_so_and_the_others_see_the_batch(
    how, arg, is_async
):
    prompts = ["1+2=", "3+4=", "5+6="]
    completions = ["3<eos>", "8<eos>", "11<eos>"]
    ids = [[5, 1], [10, 1], [3, 3, 1]]
    answers = ["3", "7", "11"]
    seen = {}

    def mutate(prompts, completions, completion_ids, answer, **kw):
        MUTATIONS[how]({"prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                        "answer": answer}[arg])  # fmt: skip
        return [0.0, 1.0, 0.0]

    async def mutate_async(prompts, completions, completion_ids, answer, **kw):
        return mutate(prompts, completions, completion_ids, answer)

    def after(prompts, completions, completion_ids, answer, **kw):
        seen.update(prompts=prompts, completions=completions, completion_ids=completion_ids, answer=answer)
        return [1.0] * len(completions)

    fn = mutate_async if is_async else mutate
    with pytest.raises(RewardError) as e:
        compute_rewards([fn, after], ["mutates", "after"], prompts, completions, ids, {"answer": answers})
    message = str(e.value)
    assert message.startswith(f"reward 'mutates' changed the list '{arg}' it was given"), message
    # The trainer's lists, and what the next reward was given, are the batch as it was.
    assert prompts == ["1+2=", "3+4=", "5+6="] and completions == ["3<eos>", "8<eos>", "11<eos>"]
    assert ids == [[5, 1], [10, 1], [3, 3, 1]] and answers == ["3", "7", "11"]
    assert seen == {"prompts": prompts, "completions": completions, "completion_ids": ids, "answer": answers}
