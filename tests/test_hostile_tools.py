"""Tools that would hang or end a run, by class (tinygrpo/rollout/tool_worker.py): a tool that sleeps, one that
catches what would stop it, one stuck in C, one that floods, one whose reply holds the call delimiters, one that
raises, exits or kills its process, one that returns None or what cannot be printed. A fuzzer calls them in any
order: every call is answered, with the outcome its class allows, and the whole sequence ends within a bound a hang
would never meet. An environment's bounds are checked at definition, and one that cannot be imported is one line."""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinygrpo.rollout.environment import MAX_TIMEOUT_S, OUTCOMES, Environment, get_environment

# The deadline of a call (counted from when the worker can take it): the tools that return at once do so far inside
# it on a loaded machine; those that never return always reach it.
TIMEOUT = 0.5


def sleeps(a: int) -> int:
    """Sleeps.

    Args:
        a: Anything.
    """
    time.sleep(1000)
    return a


def ignores_timeouts(a: int) -> int:
    """Catches every exception, and sleeps on.

    Args:
        a: Anything.
    """
    while True:
        try:
            time.sleep(1000)
        except BaseException:  # noqa: BLE001, SIM105  (the hostile part: whatever comes, sleep on)
            continue


def busy_in_c(a: int) -> int:
    """Spins in C, where no Python signal handler runs.

    Args:
        a: Anything.
    """
    return sum(range(10**13))


def floods(a: int) -> str:
    """A megabyte.

    Args:
        a: Anything.
    """
    return "1" * 1_000_000


def delimits(a: int) -> str:
    """A reply that reads as more calls.

    Args:
        a: Anything.
    """
    return "1><2=3"


def raises(a: int) -> int:
    """Raises.

    Args:
        a: Anything.
    """
    raise RuntimeError("boom")


def exits(a: int) -> int:
    """Raises SystemExit.

    Args:
        a: Anything.
    """
    raise SystemExit(3)


def kills_its_process(a: int) -> int:
    """Ends its process at once.

    Args:
        a: Anything.
    """
    os._exit(5)


def returns_none(a: int) -> None:
    """Nothing.

    Args:
        a: Anything.
    """
    return None


class Unprintable:
    def __str__(self) -> str:
        raise ValueError("no text")


def returns_unprintable(a: int) -> object:
    """What cannot be printed.

    Args:
        a: Anything.
    """
    return Unprintable()


def adds_one(a: int) -> int:
    """The well-behaved tool.

    Args:
        a: A number.
    """
    return a + 1


TOOLS = (sleeps, ignores_timeouts, busy_in_c, floods, delimits, raises, exits, kills_its_process)
TOOLS += (returns_none, returns_unprintable, adds_one)
# Each tool's outcome, and its reply's text
EXPECTED = {
    "sleeps": ("timeout", "?>"),
    "ignores_timeouts": ("timeout", "?>"),
    "busy_in_c": ("timeout", "?>"),
    "floods": ("bad_reply", "?>"),
    "delimits": ("bad_reply", "?>"),
    "raises": ("raised", "?>"),
    "exits": ("raised", "?>"),
    "kills_its_process": ("raised", "?>"),
    "returns_none": ("ok", "None>"),  # (its letters: unwritable, when a tokenizer reads it)
    "returns_unprintable": ("raised", "?>"),
    "adds_one": ("ok", None),
}
HOSTILE = Environment(
    "hostile",
    "tools that would hang or end a run",
    TOOLS,
    lambda s: tuple(s.split(" ", 1)[:1]) + ([s.split(" ", 1)[1]],),
    timeout_s=TIMEOUT,
)


def expected(call: str) -> tuple[str, str]:
    name, arg = call.split(" ")
    outcome, text = EXPECTED[name]
    return outcome, text if text is not None else f"{int(arg) + 1}>"


def answered_within(fn, bound: float):
    """fn() on a thread; fails if it has not returned within `bound` seconds (a hang would never return: the bound
    is generous, many times the deadlines it adds up)."""
    out: list = []
    worker = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    worker.start()
    worker.join(bound)
    assert not worker.is_alive(), f"still running after {bound:.0f} s: a call that hangs the run"
    return out[0]


@pytest.mark.slow
@pytest.mark.kills
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(sorted(EXPECTED)), min_size=1, max_size=6), st.integers(-5, 5))
def test_any_sequence_of_hostile_calls_is_answered_each_as_its_class_allows(names, arg):
    calls = [f"{n} {arg}" for n in names]
    # one call at a time, and all in one batch (as a decode step sends them)
    one_by_one = answered_within(lambda: [HOSTILE.call(c) for c in calls], 60 + 10 * len(calls) * TIMEOUT)
    batched = answered_within(lambda: HOSTILE.call_many(calls), 60 + 10 * len(calls) * TIMEOUT)
    for got in (one_by_one, batched):
        assert [(r.outcome, r.text) for r in got] == [expected(c) for c in calls]
        assert all(r.outcome in OUTCOMES for r in got)


@pytest.fixture(scope="module")
def tok():
    from tiny_lm import build_tokenizer

    return build_tokenizer("0123456789*+=<>?")  # (the calculator's characters: no letters)


@pytest.mark.kills
def test_a_decode_step_with_hostile_calls_feeds_each_row_its_reply(tok):
    """The trainer's path (ToolCalls in the decoding loop): rows that end calls to hostile tools in one step are
    answered, the flood and the delimiters as failures, None as unwritable, the good call as its result."""
    import torch

    from tinygrpo.rollout.tool_calls import ToolCalls

    env = Environment(
        "calc_hostile",
        "x",
        TOOLS,
        lambda s: (["adds_one", "floods", "delimits", "returns_none"][int(s[0])], [s[1]]),
        timeout_s=TIMEOUT,
    )
    calls = ToolCalls(env, tok, rows=4, eos_token_id=tok.eos_token_id)
    ids = lambda text: torch.tensor(tok.convert_tokens_to_ids(list(text)))  # noqa: E731
    live = torch.arange(4)
    for step in range(4):  # each row writes "<k5=": call k with the argument 5
        sampled = torch.stack([ids(f"<{k}5=")[step] for k in range(4)])
        fed_tokens, fed = calls.next_tokens(live, sampled)
        assert not fed.any()
    assert dict(calls.outcomes) == {"ok": 1, "bad_reply": 2, "unwritable": 1}
    replies = ["".join(tok.convert_ids_to_tokens(list(calls.owed[r]))) for r in range(4)]
    assert replies == ["6>", "?>", "?>", "?>"]


def ignores_sigterm(a: int) -> int:
    """Ignores SIGTERM (a polite stop), then sleeps on.

    Args:
        a: Anything.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(1000)
    return a


@pytest.mark.kills
def test_a_tool_that_ignores_sigterm_is_answered_as_timed_out_and_its_worker_is_gone():
    """A tool that ignores SIGTERM past its deadline: the call is answered `timeout`, the worker it ran in is dead
    (killed: a worker stopped with SIGTERM would never end, and the call would hang the run), and the next call is
    answered by a fresh worker. Only the outcome is asserted; the bound is a hang guard, many deadlines long."""
    from tinygrpo.rollout.tool_worker import worker_of

    env = Environment(
        "ignores_sigterm",
        "a tool that ignores SIGTERM",
        (ignores_sigterm, adds_one),
        lambda s: tuple(s.split(" ", 1)[:1]) + ([s.split(" ", 1)[1]],),
        timeout_s=TIMEOUT,
    )
    assert env.call("adds_one 1").text == "2>"  # (the worker started, from the main thread)
    worker = worker_of(env)
    process = worker.process
    try:
        got = answered_within(lambda: env.call("ignores_sigterm 1"), 60)
        assert (got.outcome, got.text) == ("timeout", "?>")
        assert not process.is_alive() and process.exitcode == -signal.SIGKILL
        assert worker.process is None  # (stopped: the next call starts another)
        assert env.call("adds_one 2").text == "3>"
        assert worker.process is not None and worker.process.pid != process.pid
    finally:
        if (
            process.is_alive()
        ):  # (a worker the stop could not end: ended here, and the hung stop then finishes)
            os.kill(process.pid, signal.SIGKILL)
        else:
            worker.stop()


def test_an_environments_bounds_are_checked_at_definition():
    for bad in (0, -1, math.nan, math.inf, MAX_TIMEOUT_S + 1, "1", True):
        with pytest.raises(ValueError, match="timeout_s must be a number of seconds in"):
            Environment("e", "x", (adds_one,), lambda s: ("adds_one", [s]), timeout_s=bad)
    for bad in (0, -1, 10_001, 1.5):
        with pytest.raises(ValueError, match="max_reply_chars must be an integer"):
            Environment("e", "x", (adds_one,), lambda s: ("adds_one", [s]), max_reply_chars=bad)
    with pytest.raises(ValueError, match="max_calls must be an integer >= 0"):
        Environment("e", "x", (adds_one,), lambda s: ("adds_one", [s]), max_calls=-1)


@pytest.mark.parametrize(
    "source, why",
    [
        ("raise RuntimeError('at import')", "RuntimeError: at import"),
        ("def broken(:\n", "SyntaxError"),
        ("import no_such_module_anywhere", "ModuleNotFoundError"),
    ],
)
def test_an_environment_module_that_cannot_be_imported_is_one_line(tmp_path, monkeypatch, source, why):
    (tmp_path / "my_envs.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as e:
        get_environment("my_envs:ENV")
    assert (
        str(e.value).count("\n") == 0
        and "'my_envs' cannot be imported" in str(e.value)
        and why in str(e.value)
    )
