"""A configuration fuzzer for both entry points (issue 30): random combinations of 1 to 4 flags, in and out of range,
on top of a tiny, fast run. Every example must either stop at start-up with exactly one `error:` line on stderr and
exit 1, or run to its end (exit 0) and save finite weights; never raise, crash, or run without bound.

The values come from the dataclasses themselves: each field's type, its choices (option_choices) and, for GRPOConfig,
its range (option_bounds): just inside, just outside, the extremes, and the wrong type as a string. A field
this file does not know how to fill fails the test (a new field is fuzzed, or this file says why not).

Each example runs in a forked child of the test process: the imports are paid once, no state leaks from one example
into the next (torch's RNG, accelerate's singletons, the registries, the working directory), and the child gets a
wall-clock limit, a memory limit and a captured traceback.

CI runs a fixed set of examples (derandomize). On demand, longer:
    TINYGRPO_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz_config.py --hypothesis-show-statistics
"""

from __future__ import annotations

import faulthandler
import io
import json
import logging
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
import typing
import warnings
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

import train_grpo
import train_sft
from rewards import REWARD_REGISTRY
from tinygrpo.base.options import Bound, option_bounds, option_choices
from tinygrpo.base.parser import _field_kind  # (the parser's own reading of a field's annotation)
from tinygrpo.run.config import GRPOConfig
from tinygrpo.sft.config import SFTConfig

EXAMPLES = int(os.environ.get("TINYGRPO_FUZZ_EXAMPLES", "0"))
# CI: an example takes 0.05-1 s (most end at start-up); with these the file takes ~60 s on one busy core.
CI_EXAMPLES = {"grpo": 60, "sft": 30}
# A 2-step run of the base below takes < 1 s; one still going after this long has no bound on its cost.
TIME_LIMIT_S = float(os.environ.get("TINYGRPO_FUZZ_TIME_LIMIT", "60"))
MEMORY_LIMIT = 3 << 30  # bytes of address space a child may add; more is a size without a bound (class 3)

# Extreme ints: the largest a C int holds (torch threads, seeds), and a power of two (a multiple of num_generations)
BIG, HUGE_EVEN = 2**31 - 1, 2**30
NOT_A_NUMBER = ["x", "1.5e", ""]  # wrong types, as a command line gives them
INF, NAN = math.inf, math.nan
BOUNDS = option_bounds(GRPOConfig)  # each field's declared range


# ================================================================================================ values per field


def _around(bound: Bound, integer: bool) -> list[float]:
    """Each end of `bound` and its two neighbours (one inside, one outside), then ordinary values inside."""
    step: Callable[[float, float], float] = (
        (lambda x, to: x + (1 if to > x else -1)) if integer else math.nextafter
    )
    out: list[float] = []
    for end in (bound.lo, bound.hi):
        if end is not None:
            x = int(end) if integer else float(end)
            out += [x, step(x, -INF), step(x, INF)]
    if bound.lo is not None and bound.hi is not None:
        out.append(int((bound.lo + bound.hi) // 2) if integer else (bound.lo + bound.hi) / 2)
    else:  # (an ordinary setting far from the end: 1.0 is where --epsilon once failed at step 1)
        lo = bound.lo or 0
        out += [lo + 2, lo + 8] if integer else [lo + 0.5, lo + 1.0, lo + 10.0]
    return out


def _numbers(kind: type, bound: Bound | None, extremes: bool = True) -> list[str]:
    integer = kind is int
    if bound is not None:
        xs = _around(bound, integer)
    else:
        xs = [-1, 0, 1, 2, 3] if integer else [-1.0, 0.0, 0.5, 1.0, 2.0]
    if extremes:
        xs += [HUGE_EVEN, BIG, -BIG - 1] if integer else [1e308, -1e308, 5e-324, INF, -INF, NAN]
    return [str(x) for x in dict.fromkeys(xs)] + NOT_A_NUMBER + ([] if integer else ["1.5"])


def _lists(items: list[str], max_items: int = 3) -> st.SearchStrategy[list[str]]:
    """A list flag's tokens: none (argparse's "expected at least one argument"), one, or several."""
    return st.lists(st.sampled_from(items), min_size=0, max_size=max_items)


BOOLS = ["true", "false", "1", "0", "maybe", ""]
SPLITS = ["train", "test", "nope", ""]
REWARDS = [*sorted(REWARD_REGISTRY), "nope", "rewards:nope", "nope.py:f", "os:getcwd"]

# Fields whose size is the length of the run the user asked for (steps, passes): a huge value is a long run, as
# asked, not a missing bound, so they get no extremes (the rest of their range is fuzzed).
DURATIONS = {"max_steps", "num_iterations"}


class Tokens(typing.NamedTuple):
    """A field's command-line values (one token each), and whether the field is a list (several tokens)."""

    values: list[str]
    is_list: bool


def _field_values(cls: type, skip: set[str], special: dict[str, list[str]]) -> dict[str, Tokens]:
    """Each field's command-line values, from its type and (GRPOConfig) its bound or choices."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Tokens] = {}
    for f in fields(cls):
        if f.name in skip:
            continue
        kind, is_list, nullable = _field_kind(hints[f.name])
        if f.name in special:
            values = special[f.name]
        elif f.name in (choices := option_choices(cls)):
            allowed = list(choices[f.name])
            values = [*allowed, allowed[0].upper(), "nope", ""]
        elif kind is bool:
            values = BOOLS
        elif kind in (int, float):
            bound = BOUNDS.get(f.name) if cls is GRPOConfig else None
            values = _numbers(kind, bound, extremes=f.name not in DURATIONS)
        else:
            raise AssertionError(
                f"{cls.__name__}.{f.name} ({kind.__name__}): no values to fuzz it with; add some"
            )
        if nullable and f.default is None:
            values = [*values, "None"]
        out[f.name] = Tokens(values, is_list)
    return out


def _flags(table: dict[str, Tokens]) -> st.SearchStrategy[list[tuple[str, list[str]]]]:
    """1 to 4 distinct flags, each with its tokens (a list field: none, one or several)."""
    values = {
        name: _lists(t.values) if t.is_list else st.sampled_from(t.values).map(lambda v: [v])
        for name, t in table.items()
    }
    one = st.sampled_from(sorted(values)).flatmap(lambda name: st.tuples(st.just(name), values[name]))
    return st.lists(one, min_size=1, max_size=4, unique_by=lambda kv: kv[0])


# ================================================================================================ running one example


def _vm_bytes() -> int:
    """This process's address space now (Linux); 0 where /proc says nothing."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _command_line_warnings() -> None:
    """Warnings as `python train_*.py` shows them: Python's default filters, printed on stderr (pytest records them
    instead, which would hide a warning line that the command line prints before its error line)."""
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


def _child(main: Callable[[list[str]], int], argv: list[str], where: Path) -> None:
    """In the forked child: the entry point on argv, its stdout / stderr into files, the outcome into a JSON file."""
    outcome: dict = {"rc": None, "traceback": ""}
    try:
        os.chdir(where)  # (a relative path in a fuzzed value lands here, never in the repository)
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(where / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
        faulthandler.enable(file=sys.stderr)  # a crash's stack into the child's stderr, not into pytest's
        _command_line_warnings()
        # handlers made before the fork hold pytest's capture: point them at the child's stderr
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
            for h in getattr(logger, "handlers", []):
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                    h.setStream(sys.stderr)
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = _vm_bytes() + MEMORY_LIMIT
        resource.setrlimit(
            resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard)
        )
        try:
            outcome["rc"] = main(argv)
        except SystemExit as e:  # (what `python train_*.py` would exit with)
            outcome["rc"] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            outcome["system_exit"] = True
        except BaseException:  # noqa: BLE001  (the finding: a traceback)
            outcome["traceback"] = traceback.format_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            (where / "outcome.json").write_text(json.dumps(outcome))
        finally:
            os._exit(0)  # never return into pytest


def run_forked(main: Callable[[list[str]], int], argv: list[str], where: Path) -> dict:
    """`main(argv)` in a forked child, working in `where`: {"rc", "traceback", "stderr", "signal", "timed_out"}."""
    pid = os.fork()
    if pid == 0:
        _child(main, argv, where)
    deadline = time.monotonic() + TIME_LIMIT_S
    timed_out, status = False, None
    try:
        while status is None:
            done, st_ = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st_
            elif time.monotonic() > deadline:
                timed_out = True
                break
            else:
                time.sleep(0.005)
    finally:
        if status is None:  # timed out, or the test was interrupted: end our own child, by its id
            os.kill(pid, signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
    result_file = where / "outcome.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {"rc": None, "traceback": ""}
    result["stderr"] = (where / "stderr").read_text(errors="replace") if (where / "stderr").is_file() else ""
    result["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) and not timed_out else None
    result["timed_out"] = timed_out
    return result


def _finite_weights(path: Path) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in load_file(str(path)).values())


def check(result: dict, saved: Path) -> str:
    """The property: a one-line start-up error with exit 1, or a finished run that saved finite weights. Returns
    the outcome's kind (for the statistics); fails with what went wrong."""
    err, rc = result["stderr"], result["rc"]
    assert not result["timed_out"], (
        f"still running after {TIME_LIMIT_S:.0f} s (a cost without a bound)\n{err[-2000:]}"
    )
    assert result["signal"] is None, f"killed by signal {result['signal']} (a crash)\n{err[-2000:]}"
    assert not result["traceback"], f"raised:\n{result['traceback']}"
    assert "Traceback" not in err, f"a traceback on stderr:\n{err[-3000:]}"
    assert rc in (0, 1), f"exit code {rc!r}\n{err[-2000:]}"
    if rc == 1:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), f"not one `error:` line:\n{err[-3000:]}"
        return "error line"
    assert saved.is_file(), f"exit 0 but no {saved.name} saved\n{err[-2000:]}"
    assert _finite_weights(saved), f"exit 0 but {saved} holds NaN or infinite weights"
    return "ran, with lines on stderr" if err.strip() else "ran"


def _rows(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        rows.append(row if isinstance(row, dict) else {})
    return rows


def _argv(flags: list[tuple[str, list[str]]]) -> list[str]:
    return [tok for name, values in flags for tok in (f"--{name}", *values)]


# ================================================================================================ the fuzzers


class Known(typing.NamedTuple):
    """A failure this fuzzer found whose fix belongs to another part of issue 30."""

    entry: str  # "grpo" (train_grpo.py) or "sft" (train_sft.py)
    flag: str
    values: tuple[str, ...]  # the flag's values that fail (for a list flag: any of its items)
    run: tuple[str, ...]  # the flags of one failing run, for test_known_failure_still_fails
    reason: str  # what goes wrong, and where the fix belongs


_HUGE = (str(HUGE_EVEN), str(BIG))
_OOM = (
    "a traceback (out of memory) where a bound derived from the size belongs at start-up (issue 30, class 3)"
)
# Each row is checked by test_known_failure_still_fails, a strict xfail: the day its fix lands, that test XPASSes and
# fails the run; then delete the row. Until then the fuzzer does not run an example holding one of these values (it
# would fail, or hang, for the known reason) and counts it (--hypothesis-show-statistics). Nothing else is skipped.
KNOWN: list[Known] = []  # (the rows the fuzzer found are fixed: each XPASSed once its fix landed)


def _known(entry: str, flags: list[tuple[str, list[str]]]) -> str | None:
    """The reason of the first KNOWN row that an example's flags hit, or None."""
    for k in KNOWN:
        if k.entry == entry and any(name == k.flag and set(v) & set(k.values) for name, v in flags):
            return k.reason
    return None


@pytest.fixture(scope="module")
def warm() -> None:
    """Import what the entry points import lazily, once, here: each forked child then starts in milliseconds."""
    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    import tiny_lm  # noqa: F401
    import tinygrpo.data.problems  # noqa: F401
    import tinygrpo.run.launch  # noqa: F401
    import tinygrpo.run.trainer  # noqa: F401


def grpo_base(ref: str, out: Path) -> list[str]:
    """A 2-step run of 2 prompts x 4 samples on the seed bank, evaluated on its train split, nothing else written."""
    return [
        *("--model_name_or_path", ref, "--dataset_name", "seed_bank", "--dataset_train_split", "train"),
        *"--dataset_test_split train --allow_overlapping_splits true --per_device_train_batch_size 8 --num_generations 4 --max_completion_length 3".split(),
        *"--max_steps 2 --save_steps 0 --logging_steps 1 --eval_steps 1 --make_plots false --make_report false".split(),
        *"--torch_num_threads 1 --disable_tqdm true --output_dir".split(),
        str(out),
    ]


def sft_base(ref: str, out: Path) -> list[str]:
    """3 steps of a 1-layer, 16-wide model on the seed bank's 36 problems, no evaluation (`ref`: unused), on the
    forked child's own kernels unless the example fuzzes --kernels (portable starts one more process)."""
    argv = "--dataset_name seed_bank --dataset_train_split train --train_size 0 --max_steps 3 --per_device_train_batch_size 8 --n_layer 1"
    argv += " --n_embd 16 --n_head 2 --n_positions 16 --logging_steps 0 --torch_num_threads 1 --kernels native --output_dir"
    return [*argv.split(), str(out), "--dataset_test_split", ""]


REFERENCE = (
    "{reference}"  # in a fuzzed value: the seed reference's directory (a fixture's, known at run time)
)
DATASETS = ["seed_bank", "addition", "nope", ""]
GRPO_VALUES = _field_values(
    GRPOConfig,
    skip={"output_dir"},  # (the example's own directory: a fuzzed one would write outside it)
    special={
        "model_name_or_path": [REFERENCE, "nope", ""],
        "ref_model_name_or_path": [REFERENCE, "nope", ""],
        "dataset_name": DATASETS,
        "dataset_train_split": SPLITS,
        "dataset_test_split": SPLITS,
        "resume_from_checkpoint": ["latest", "nope", ""],
        "reward_funcs": REWARDS,
        # (a task's dataset, verifier and recipe are defaults, the base argv's flags override them)
        "task": ["reverse", "seed_bank", "nope", "reasoning_gym:nope", "nope.py", ""],
        "eval_reward": ["accuracy", "accuracy_lenient", "countdown", "nope", "os:getcwd", ""],
        # (the seed bank's tokenizer has none of the calculator's '<>?': an error line)
        "environment": ["calculator", "calculator_one_digit", "nope", "os:getcwd", "None", ""],
        # (accelerate's trackers: one installed, one not, all, an unknown one among known ones)
        "report_to": ["none", "tensorboard", "wandb", "all", "tensorboard,nope", "nope", ""],
        "run_name": ["a run", ""],
        "metric_for_best_model": [
            "accuracy",
            "nope",
            "",
        ],  # (read by callbacks only: none on the command line)
    },
)
SFT_VALUES = _field_values(
    SFTConfig,
    skip={"output_dir"},
    special={
        "dataset_name": DATASETS,
        "dataset_train_split": SPLITS,
        "dataset_test_split": SPLITS,
        "chars": ["0123456789+=", "0123456789+=-*", "ab", ""],
        # (a task's recipe sets the defaults, the base argv's flags override them; a family's unknown member and a
        # task without a recipe are errors)
        "task": ["reverse", "seed_bank", "nope", "reasoning_gym:nope", ""],
        "completion_column": ["answer", "worked", "nope", ""],
        "mix_column": ["answer", "worked", "nope", ""],
        "environment": ["calculator", "nope", "os:getcwd", ""],
    },
)


class Entry(typing.NamedTuple):
    main: Callable[[list[str]], int]
    base: Callable[[str, Path], list[str]]  # (reference, output directory) -> the tiny run's argv
    saved: str  # the weights a finished run saves, under its output directory
    values: dict[str, Tokens]


ENTRIES = {
    "grpo": Entry(train_grpo.main, grpo_base, "final/model.safetensors", GRPO_VALUES),
    "sft": Entry(train_sft.main, sft_base, "model.safetensors", SFT_VALUES),
}


def run_example(entry: str, extra: list[str], ref: str, where: Path) -> str:
    """The tiny run of `entry` with the flags `extra` after its own (later flags win), in a child working in
    `where`; the property checked. Returns the outcome's kind."""
    e = ENTRIES[entry]
    argv = [*e.base(ref, where / "out"), *(ref if tok == REFERENCE else tok for tok in extra)]
    kind = check(run_forked(e.main, argv, where), where / "out" / e.saved)
    if kind == "error line" and any(r.get("step", 0) > 0 for r in _rows(where / "out" / "metrics.jsonl")):
        kind = "error line after training started"  # (allowed: a run that diverges is stopped with a line)
    return kind


def _fuzz(entry: str, flags: list[tuple[str, list[str]]], ref: str, tmp: Path) -> None:
    reason = _known(entry, flags)
    if reason:
        event(f"known failure, not run: {reason}")
        return
    note(f"{entry} flags: {_argv(flags)}")
    where = Path(tempfile.mkdtemp(dir=tmp))
    try:
        event(run_example(entry, _argv(flags), ref, where))
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def fuzz_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


FUZZ = dict(
    deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck), print_blob=False
)


@pytest.mark.slow
@pytest.mark.kills
@settings(max_examples=EXAMPLES or CI_EXAMPLES["grpo"], **FUZZ)
@given(flags=_flags(GRPO_VALUES))
def test_grpo_flags(flags, seed_reference, warm, fuzz_tmp):
    _fuzz("grpo", flags, seed_reference, fuzz_tmp)


@pytest.mark.slow
@pytest.mark.kills
@settings(max_examples=EXAMPLES or CI_EXAMPLES["sft"], **FUZZ)
@given(flags=_flags(SFT_VALUES))
def test_sft_flags(flags, seed_reference, warm, fuzz_tmp):
    _fuzz("sft", flags, seed_reference, fuzz_tmp)


def test_the_fuzzer_sees_every_field_and_its_bounds():
    """Every field but output_dir is fuzzed; a bounded number gets both sides of each end of its range."""
    assert set(GRPO_VALUES) == {f.name for f in fields(GRPOConfig)} - {"output_dir"}
    assert set(SFT_VALUES) == {f.name for f in fields(SFTConfig)} - {"output_dir"}
    assert _numbers(float, BOUNDS["top_p"])[:7] == [
        "0.0",
        "-5e-324",
        "5e-324",
        "1.0",
        "0.9999999999999999",
        "1.0000000000000002",
        "0.5",
    ]
    assert _numbers(int, BOUNDS["num_generations"])[:4] == ["2", "1", "3", "4"]
    assert "2147483647" in _numbers(int, BOUNDS["explore_rounds"]) and "nan" in _numbers(float, None)
    assert "2147483647" not in _numbers(int, BOUNDS["max_steps"], extremes=False)


@pytest.mark.kills
def test_a_child_that_raises_crashes_or_hangs_is_reported(tmp_path, monkeypatch):
    """The runner itself: a traceback, a signal, a time-out and a clean error line are told apart."""

    def raises(argv):
        raise RuntimeError("boom")

    def crashes(argv):
        os.kill(os.getpid(), signal.SIGSEGV)

    def errs(argv):
        print("error: bad value", file=sys.stderr)
        return 1

    assert "RuntimeError: boom" in run_forked(raises, [], tmp_path)["traceback"]
    assert run_forked(crashes, [], tmp_path)["signal"] == signal.SIGSEGV
    assert check(run_forked(errs, [], tmp_path), tmp_path / "none") == "error line"
    monkeypatch.setattr(sys.modules[__name__], "TIME_LIMIT_S", 0.5)
    assert run_forked(lambda argv: time.sleep(30), [], tmp_path)["timed_out"]


@pytest.mark.kills
@pytest.mark.parametrize(
    "known",
    [
        pytest.param(
            k, marks=pytest.mark.xfail(strict=True, reason=k.reason), id=f"{k.entry}:{' '.join(k.run)}"
        )
        for k in KNOWN
    ],
)
def test_known_failure_still_fails(known: Known, seed_reference, warm, tmp_path, monkeypatch):
    """Each KNOWN row's run, alone: it fails until its fix lands (then this XPASSes: delete the row). A run that hangs
    is stopped after 5 s (fixed, it stops at start-up within a second)."""
    monkeypatch.setattr(sys.modules[__name__], "TIME_LIMIT_S", min(TIME_LIMIT_S, 5.0))
    assert _known(known.entry, [(known.flag, [v]) for v in known.values]) == known.reason
    run_example(known.entry, list(known.run), seed_reference, tmp_path)
