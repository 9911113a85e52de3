"""Tool calls in a worker process, so that no tool can hang or end the run.

A tool is anyone's code: it may sleep, catch the timeout meant to stop it, spin in C where no Python signal reaches
it, print a megabyte, or raise SystemExit. The calls of an environment run in a worker, a fork of the run (the
environment's functions come along, whatever module defines them) started on the first call and reused. Each call
has a hard deadline of the environment's `timeout_s`: past it the worker is killed (SIGKILL, which nothing in it can
catch), the call is answered as timed out, and a fresh worker takes the next call. Whatever a call does inside the
worker is an answered failure (Environment.answer); a worker that dies anyway (os._exit, a crash) answers the call
it was on as raised. The worker dies with the run (PR_SET_PDEATHSIG) and leaves when its pipe closes.

A decode step's calls go to the worker in one message and come back one by one: one round trip a step, not a call.

An environment over turns keeps its episodes' instances here (`_Episodes`): a call that hangs kills them with the
worker, and the episodes end (their next call is answered `lost`); the run goes on.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

Reply = Any  # an environment's Reply (tinygrpo/rollout/environment.py): text, outcome, done, detail


def why(e: BaseException) -> str:
    """An exception in a few words, as a failed reply's detail (the run's error quotes it)."""
    return f"{type(e).__name__}: {e}"[:200]


class Environment(Protocol):
    """What the worker runs of an environment (tinygrpo/rollout/environment.py's Environment is one; it calls the
    worker, so the worker reads it through this, not by importing it)."""

    factory: Callable[[], Any] | None
    timeout_s: float
    max_reply_chars: int
    max_calls: int
    delimiters: tuple[str, ...]

    def answer(self, text: str, instance: Any = None) -> Reply: ...

    def failed(self, outcome: str, done: bool = False, detail: str = "") -> Reply: ...

    def observation(self, text: str, done: bool) -> Reply: ...

    def calls_in(
        self, text: str, max_calls: int, replies: Callable[[str], str] | None = None
    ) -> list[tuple[str, int, int]]: ...


READY = "ready"  # the worker's first message: it can take calls
STARTUP_S = 60.0  # a worker not up by then is taken for dead


def _serve(conn, env: Environment, die_with_parent: bool) -> None:
    """The worker: answer each batch of calls' texts, one reply at a time, until the pipe closes."""
    if die_with_parent:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the run
        except (OSError, AttributeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (Ctrl-C is the run's to handle, not a tool's)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    conn.send(READY)
    episodes = _Episodes(env)
    while True:
        try:
            ops = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        for op in ops:
            out = env.answer(op) if isinstance(op, str) else episodes.do(op)
            try:
                conn.send(out)
            except KeyboardInterrupt:
                raise
            except BaseException:  # noqa: BLE001  (an episode's instance that cannot be sent: none; pickling fails
                conn.send(None)  # before anything is written, so the pipe stays whole)


class _Episodes:
    """The instances of an environment over turns, by episode key (in the worker). Whatever an instance does is an
    answered failure that ends its episode (Environment.answer's rule), never the worker's end."""

    def __init__(self, env: Environment) -> None:
        self.env, self.live = env, {}

    def do(self, op: tuple) -> Any:
        return getattr(self, op[0])(*op[1:])

    def reset(self, key, row: dict) -> Reply:
        env = self.env
        try:
            instance = env.factory()
            text = instance.reset(**row)
            text = "" if text is None else str(text)
            done = bool(getattr(instance, "done", False))
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001  (a factory's or reset's error: the episode cannot start)
            return env.failed("raised", done=True, detail=why(e))
        if len(text) > env.max_reply_chars or any(c in text for c in env.delimiters):
            detail = f"{len(text)} characters, {env.max_reply_chars} at most, or a delimiter: {text[:40]!r}"
            return env.failed("bad_reply", done=True, detail=detail)
        self.live[key] = instance
        return env.observation(text, done)

    def step(self, key, text: str) -> Reply:
        instance = self.live.get(key)
        if instance is None:  # (lost with a worker that was killed, or never started)
            return self.env.failed("lost", done=True)
        reply = self.env.answer(text, instance)
        try:
            done = bool(getattr(instance, "done", False))
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001  (an instance that cannot say whether it is done is done)
            done = True
        return replace(reply, done=done) if done else reply

    def collect(self, key) -> Any:
        """The episode's instance, to be sent back (None: lost), and forgotten here."""
        return self.live.pop(key, None)

    def transcript(self, row: dict, text: str) -> list[tuple[str, int, int, str]] | Reply:
        """A text written out whole (an SFT target), replayed on a fresh episode: (call, start, stop, reply) for each
        call, text[start:stop] what the target says the reply is; a failed reset or call is its Reply."""
        key = ("transcript", os.getpid())
        first = self.reset(key, row)
        if first.outcome != "ok":
            return first
        replies: list[Reply] = []

        def reply(call: str) -> str:
            replies.append(self.step(key, call))
            return replies[-1].text

        try:
            calls = self.env.calls_in(text[len(first.text) :], self.env.max_calls, reply)
        finally:
            self.live.pop(key, None)
        bad = next((r for r in replies if r.outcome != "ok"), None)
        if bad is not None:
            return bad
        at = len(first.text)
        return [(c, at + a, at + b, r.text) for (c, a, b), r in zip(calls, replies, strict=True)]


class ToolWorker:
    """The worker of one environment (see the module docstring)."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.process = None
        self.conn = None

    def _start(self) -> None:
        # (tokenizers warns in a fork of a process that used its threads, unless told how to behave)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe()
        # The kernel's parent-death signal follows the thread that forks: asked for from the main thread only (the
        # run's); a worker started by another thread would die with that thread.
        main = threading.current_thread() is threading.main_thread()
        self.process = ctx.Process(target=_serve, args=(child, self.env, main), daemon=True, name="tools")
        self.process.start()
        child.close()
        # A call's deadline counts from when the worker can take it: a fork of a large process, on a loaded machine,
        # can take longer to start than a call may (that is no call's fault). A worker not up in STARTUP_S is dead.
        try:
            up = self.conn.poll(STARTUP_S) and self.conn.recv() == READY
        except (EOFError, OSError):
            up = False
        if not up:
            self.stop()
            raise OSError("the tool worker did not start")

    def stop(self) -> None:
        """Kill the worker (a later call starts another)."""
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.conn.close()
        self.process = self.conn = None

    def answer(self, texts: list) -> list:
        """The replies to `texts` (calls' texts, or an episode's operations), in order; each waits at most
        timeout_s. A call that fails here (the worker killed or dead on it) is answered as failed; an episode's
        operation then ends its episode."""
        replies: list[Reply] = []
        while len(replies) < len(texts):
            if self.process is None or not self.process.is_alive():
                self.stop()
                try:
                    self._start()
                except OSError:  # (no worker: the call is answered as failed, the run goes on)
                    replies.append(_failed(self.env, texts[len(replies)], "raised"))
                    continue
            try:
                self.conn.send(texts[len(replies) :])
            except OSError:  # (it died since: the call it would have taken fails, a fresh one goes on)
                self.stop()
                replies.append(_failed(self.env, texts[len(replies)], "raised"))
                continue
            while len(replies) < len(texts):
                if not self.conn.poll(self.env.timeout_s):  # past the deadline: kill, answer, go on afresh
                    self.stop()
                    replies.append(
                        _failed(self.env, texts[len(replies)], "timeout", f"past {self.env.timeout_s} s")
                    )
                    break
                try:
                    replies.append(self.conn.recv())
                except (EOFError, OSError):  # the worker died on this call
                    self.stop()
                    replies.append(_failed(self.env, texts[len(replies)], "raised", "the process exited"))
                    break
                except Exception:  # noqa: BLE001  (an episode's instance that does not unpickle here: the message is read,
                    replies.append(
                        _failed(self.env, texts[len(replies)], "raised")
                    )  # the pipe in step; it is lost)
        return replies


def _failed(env: Environment, op, outcome: str, detail: str = "") -> Any:
    """What a call or an episode's operation that the worker could not answer is answered: the environment's error
    (ending the episode), or no instance for a collect."""
    if isinstance(op, str):
        return env.failed(outcome, detail=detail)
    return None if op[0] == "collect" else env.failed(outcome, done=True, detail=detail)


_WORKERS: dict[int, ToolWorker] = {}  # by id(environment): one worker each, for the run


def worker_of(env: Environment) -> ToolWorker:
    worker = _WORKERS.get(id(env))
    if worker is None or worker.env is not env:
        worker = _WORKERS[id(env)] = ToolWorker(env)
    return worker


@atexit.register
def _stop_all() -> None:
    for worker in _WORKERS.values():
        worker.stop()
