"""An environment: tools the policy calls from inside its completion, everything about it in one file under
`tinygrpo/rollout/environments/`.

The policy writes a call as text between two characters, `open` and `end`: the calculator's `<12*7=`. Decoding then
feeds that row the environment's reply, the tool's result and `close` (`84>`), token by token, as context it did not
sample, and resumes (tinygrpo/rollout/tool_calls.py). The reply's tokens are the environment's: the batch's completion mask
leaves them out of the policy loss, the KL and the entropy (TRL's `tool_mask`), while the model still reads them.

An environment names
- its tools: Python functions with type hints and a docstring, TRL's `tools` convention (the argument types come from
  the hints through transformers' `get_json_schema`, as TRL reads them), so a tool written for TRL works here;
- its call syntax: `parse` turns the text of a call into a tool's name and its arguments' texts, which are converted
  by the tool's hints; the three delimiters; the reply to a call that fails (`error`);
- its cap on calls per completion (`max_calls`) and on a call's seconds (`timeout_s`).

A call that fails (malformed, an unknown tool, arguments the hints refuse, a tool that raises, exits or runs past
`timeout_s`, a reply longer than `max_reply_chars` or holding a delimiter, a result the tokenizer cannot write) is
answered with `error` and counted, never raised: the run goes on. Calls run in a worker process with a hard
deadline (tinygrpo/rollout/tool_worker.py), so that no tool can hang or end the run. Adding an environment is one
file in `tinygrpo/rollout/environments/` that calls `register_environment`; docs/architecture.md says how.

An environment over turns keeps state (TRL's `environment_factory`): `factory` makes a fresh instance for each
completion, `reset(**row)` starts it on the completion's dataset row (its text, if any, is fed before the policy's
first token), and its public methods are the tools, whose replies may depend on every earlier call. The instance
ends the episode by setting `done` (decoding then feeds <eos>, the environment's token), as the cap on calls does;
reward functions read the instances after decoding (`environments=`, TRL's keyword). Such an environment may drop
the call's delimiters: `open=""` (every token the policy writes between replies is the call) and `close=""` (the
reply is the tool's result alone), as guess-the-number's turns "32?<" read (environments/guess_number.py). Its
instances live in the worker too: a call that hangs kills the worker and every episode in it; those episodes end,
answered as `timeout` (the one that hung) or `lost` (the others), counted, and the run goes on (docs/turns.md).
"""

from __future__ import annotations

import importlib
import math
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinygrpo.rollout.tool_worker import why

ENVIRONMENTS_DIR = Path(__file__).resolve().parent / "environments"

# How a call ended (Reply.outcome); every outcome but "ok" is a failure, answered with the environment's `error`.
OUTCOMES = (
    "ok",
    "malformed",
    "unknown_tool",
    "bad_arguments",
    "raised",
    "timeout",
    "bad_reply",
    "unwritable",
    "lost",  # an episode whose instance was lost with its worker (another episode's call hung): it ends
)
MAX_TIMEOUT_S = 60.0  # a call's deadline is at most this (a decode waits on it)
MAX_REPLY_CHARS = 10_000  # and its reply at most this long (every character is a token fed to the policy)
_CONVERT = {
    "integer": int,
    "number": float,
    "string": str,
    "boolean": lambda s: {"true": True, "false": False}[s],
}


@dataclass(frozen=True)
class Reply:
    text: str  # what the environment feeds the row: the result and `close`, or `error` and `close`
    outcome: str  # one of OUTCOMES
    done: bool = False  # an environment over turns ended the episode (its instance's `done`, or a lost one)
    detail: str = ""  # a failure's cause, as the run's error says it ("RuntimeError: ...")


@dataclass(frozen=True)
class Environment:
    name: str
    summary: str  # one line: what the tools do
    tools: tuple[Callable[..., Any], ...]  # TRL's `tools`: type hints and a docstring each
    parse: Callable[
        [str], tuple[str, list[str]]
    ]  # a call's text -> (tool name, argument texts); ValueError: malformed
    open: str = "<"  # the policy opens a call with it ...
    end: str = "="  # ... and ends it with this; the environment's reply follows
    close: str = ">"  # the reply's last character: the policy's text resumes after it
    error: str = "?"  # the reply's text for a call that fails
    max_calls: int = (
        4  # calls answered per completion (TRL's max_tool_calling_iterations); later ones are not
    )
    timeout_s: float = 1.0  # a call that runs longer is stopped and answered with `error`
    max_reply_chars: int = 64  # a tool's result longer than this is answered with `error`
    # TRL's environment_factory: a class (or any callable) whose instances keep an episode's state; its public
    # methods besides `reset` are the tools (`tools` then stays empty). None: stateless tools.
    factory: Callable[[], Any] | None = None
    schemas: dict[str, dict] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from transformers.utils import get_json_schema

        delimiters = [c for c in (self.open, self.end, self.close) if c]
        optional = self.factory is not None  # (only an episode's turns may leave out open and close)
        if (
            len(set(delimiters)) != len(delimiters)
            or any(len(c) != 1 for c in delimiters)
            or len(self.end) != 1
            or not optional
            and len(delimiters) != 3
        ):
            raise ValueError(
                f"environment {self.name}: open, end and close must be three different characters"
                + (" (open and close may be empty)" if optional else "")
            )
        if optional:
            if self.tools:
                raise ValueError(
                    f"environment {self.name}: give tools or a factory, not both (a factory's methods are its tools)"
                )
            object.__setattr__(self, "tools", factory_methods(self.factory))
            if not self.tools:
                raise ValueError(f"environment {self.name}: its factory's instances have no public method")
        number = isinstance(self.timeout_s, int | float) and not isinstance(self.timeout_s, bool)
        if not (number and math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise ValueError(
                f"environment {self.name}: timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got "
                f"{self.timeout_s!r}"
            )
        for name, hi in (("max_reply_chars", MAX_REPLY_CHARS), ("max_calls", None)):
            value = getattr(self, name)
            lo = 0 if name == "max_calls" else 1
            if not (isinstance(value, int) and not isinstance(value, bool) and lo <= value <= (hi or value)):
                raise ValueError(
                    f"environment {self.name}: {name} must be an integer >= {lo}"
                    f"{f' and <= {hi:,}' if hi else ''}, got {value!r}"
                )
        schemas = {}
        for tool in self.tools:
            try:  # (the same check TRL makes of a tool: hints on every argument, a docstring that names them)
                # (a factory's method read as bound, so that `self` is not an argument: transformers < 5 asks
                # every argument for a type hint)
                bound = types.MethodType(tool, object()) if optional else tool
                schemas[tool.__name__] = get_json_schema(bound)["function"]["parameters"]
            except Exception as e:  # noqa: BLE001  (transformers raises several kinds: say which tool and why)
                raise ValueError(f"environment {self.name}: tool {tool.__name__}: {e}") from None
        object.__setattr__(self, "schemas", schemas)

    @property
    def stateful(self) -> bool:
        """An environment over turns: an instance per completion (TRL's environment_factory)."""
        return self.factory is not None

    @property
    def delimiters(self) -> tuple[str, ...]:
        return tuple(c for c in (self.open, self.end, self.close) if c)

    @property
    def chars(self) -> str:
        """The characters of the replies besides the tools' results: the tokenizer must have them."""
        return "".join(dict.fromkeys(self.open + self.end + self.close + self.error))

    def missing_chars(self, known) -> str:
        """The characters of `chars` outside `known` (a tokenizer's vocabulary, a task's alphabet)."""
        return "".join(c for c in self.chars if c not in known)

    def call(self, text: str) -> Reply:
        """The reply to one call (its text between `open` and `end`); never raises, never waits past timeout_s."""
        return self.call_many([text])[0]

    def call_many(self, texts: list[str]) -> list[Reply]:
        """The replies to several calls, in order: answered in the environment's worker process, each within
        timeout_s (tinygrpo/rollout/tool_worker.py)."""
        from tinygrpo.rollout.tool_worker import worker_of

        return worker_of(self).answer(texts) if texts else []

    def episode_ops(self, ops: list[tuple]) -> list[Any]:
        """An environment over turns: operations on episodes whose instances live in the worker, answered in order
        (tinygrpo/rollout/tool_worker.py: ("reset", key, row), ("step", key, text), ("collect", key),
        ("transcript", row, text)), each within timeout_s."""
        from tinygrpo.rollout.tool_worker import worker_of

        return worker_of(self).answer(ops) if ops else []

    def answer(self, text: str, instance: Any = None) -> Reply:
        """The reply to one call, computed here and now, without a deadline: what the worker runs (with `instance`,
        an episode's: its methods are the tools). Anything the parser or the tool raises (SystemExit included) is an
        answered failure; Ctrl-C still stops."""
        try:
            name, args = self.parse(text)
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001  (a parser's error, of any kind, is a call it cannot read)
            return self.failed("malformed")
        tool = next((t for t in self.tools if t.__name__ == name), None)
        if tool is None:
            return self.failed("unknown_tool")
        if instance is not None:
            tool = getattr(instance, name)
        schema = self.schemas[name]
        params = list(schema.get("properties", {}))
        if len(args) != len(params):
            return self.failed("bad_arguments")
        try:
            kwargs = {
                p: _CONVERT[schema["properties"][p].get("type", "string")](a)
                for p, a in zip(params, args, strict=True)
            }
        except (ValueError, KeyError, TypeError):
            return self.failed("bad_arguments")
        try:
            result = str(tool(**kwargs))
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001  (a tool's error, or its exit, is the model's to read, not the run's end)
            return self.failed("raised", detail=why(e))
        if len(result) > self.max_reply_chars or any(c in result for c in self.delimiters):
            return self.failed(
                "bad_reply"
            )  # (a delimiter would read as another call, or end the reply early)
        return Reply(f"{result}{self.close}", "ok")

    def failed(self, outcome: str, done: bool = False, detail: str = "") -> Reply:
        return Reply(f"{self.error}{self.close}", outcome, done, detail)

    def observation(self, text: str, done: bool) -> Reply:
        """What an episode's reset says first (answered as a call is)."""
        return Reply(text, "ok", done)

    def calls_in(
        self, text: str, max_calls: int, replies: Callable[[str], str] | None = None
    ) -> list[tuple[str, int, int]]:
        """The calls of a text written out whole (an SFT target such as "<37*48=1776>1776"), read as decoding reads
        them: each answered call's text and where its reply lies, (call, start, stop) with text[start:stop] the
        reply (up to and including `close`, or the end of the text). An episode's environment may have no `open`
        (every text between replies is a call) and no `close`: then `replies(call)`, the environment's reply in
        turn, says where the reply ends."""
        out: list[tuple[str, int, int]] = []
        at = 0
        while len(out) < max_calls:
            start = text.find(self.open, at) + 1 if self.open else at
            if self.open and start == 0:
                break
            end = text.find(self.end, start)
            if end < 0:
                break
            call = text[start:end]
            if self.close:
                stop = text.find(self.close, end + 1)
                stop = len(text) if stop < 0 else stop + 1
            else:
                stop = min(len(text), end + 1 + len(replies(call)))
            out.append((call, end + 1, stop))
            at = stop
        return out


def factory_methods(factory: Callable[[], Any]) -> tuple[Callable[..., Any], ...]:
    """TRL's environment_factory convention: the public methods of what `factory` makes, `reset` aside, are the
    tools (read off the class, so that nothing is made at definition)."""
    cls = factory if isinstance(factory, type) else type(factory())
    return tuple(
        getattr(cls, n)
        for n in dir(cls)
        if not n.startswith("_") and n != "reset" and callable(getattr(cls, n, None))
    )


ENVIRONMENTS: dict[str, Environment] = {}


def register_environment(env: Environment) -> Environment:
    """Add an environment to the registry (a module calls this at import)."""
    ENVIRONMENTS[env.name] = env
    return env


def discover_environments() -> None:
    """Import every module of tinygrpo/rollout/environments/ (names starting with `_` skipped)."""
    for path in sorted(ENVIRONMENTS_DIR.glob("*.py")):
        if not path.stem.startswith("_"):
            importlib.import_module(f"{__package__}.environments.{path.stem}")


def get_environment(name: str) -> Environment:
    """The environment `name` names: a built-in one (`calculator`) or a module's (`mypkg.envs:NAME`, a module that
    registers it); a ValueError listing the known ones otherwise."""
    module, sep, member = name.partition(":")
    if sep:
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001  (the user's module: a missing one, a syntax error, a raise)
            raise ValueError(
                f"environment {name!r}: {module!r} cannot be imported: {type(e).__name__}: {e}"
            ) from None
        if member not in ENVIRONMENTS:
            raise ValueError(
                f"environment {name!r}: importing {module!r} registered no environment {member!r}"
            )
        return ENVIRONMENTS[member]
    discover_environments()
    if name not in ENVIRONMENTS:
        raise ValueError(
            f"unknown environment {name!r} (known: {', '.join(sorted(ENVIRONMENTS))}; or module:NAME)"
        )
    return ENVIRONMENTS[name]
