"""Tool calls inside one decode: each row's open call, its calls so far and the reply it is being fed.

`ToolCalls.next_tokens` sits in the decoding loop (tinygrpo/rollout/sampling.py) between sampling and feeding: a row that is
owed a reply gets the reply's next token in place of the one it sampled (the environment's token, marked in the
rollout's `tool_mask`); any other row keeps its sample, which may open a call, add to one, or end one, whose reply
then starts on the next step. The rows stay in the one batched decode, so the grouped fast path still shares each
prompt across its samples, on either backend.

With an environment over turns (Environment.factory), the session starts an episode for each row, reset with its
prompt's dataset row (`ToolUse.rows`), feeds what reset says first, ends a row whose episode is done (or whose calls
reach the cap) by feeding <eos> as the environment's token, and hands the instances to the reward functions after
decoding (`environments`).
"""

from __future__ import annotations

import itertools
import os
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from tinygrpo.rollout.environment import Environment


@dataclass(frozen=True)
class ToolUse:
    """An environment as decoding uses it: with the run's tokenizer and cap on calls. `session(B)` gives the state
    of one decode of B rows."""

    env: Environment
    tokenizer: Any
    max_calls: int
    rows: Sequence[dict] | None = (
        None  # an episode's environment: each prompt's dataset row, reset() reads it
    )
    # The run's tally of what the environment answered, {outcome: (count, the first failure's cause)}, shared by every
    # copy (with_rows) and decode (session): a run whose rewards never apply says it (failures).
    answered: dict[str, tuple[int, str]] = field(default_factory=dict, compare=False, repr=False)

    def failures(self) -> str:
        """The environment's failures so far in this run, in words ("" when none)."""
        return failures_line(self.env.name, self.answered)

    def session(self, rows: int) -> ToolCalls:
        episodes = None
        if self.env.stateful:
            if not self.rows or rows % len(self.rows):
                raise ValueError(
                    f"environment {self.env.name}: each prompt's dataset row is needed (ToolUse.rows)"
                )
            episodes = [
                row for row in self.rows for _ in range(rows // len(self.rows))
            ]  # (rows grouped by prompt)
        return ToolCalls(
            self.env,
            self.tokenizer,
            rows,
            self.tokenizer.eos_token_id,
            self.max_calls,
            episodes,
            self.answered,
        )

    def with_rows(self, columns: dict[str, list], idx: Sequence[int] | None = None) -> ToolUse:
        """This use, with the dataset rows its episodes start from: of the prompts `idx` ({column: values}; None:
        all of them). Unchanged for stateless tools."""
        if not self.env.stateful:
            return self
        n = len(next(iter(columns.values()))) if columns else 0
        keep = range(n) if idx is None else idx
        return replace(self, rows=[{c: v[i] for c, v in columns.items()} for i in keep])


def written_calls(
    text: str, env: Environment, max_calls: int, replies: Callable[[str], str] | None = None
) -> list[tuple[str, int, int]]:
    """The calls of a text written out whole (an SFT target such as "<37*48=1776>1776"), read as decoding reads
    them: Environment.calls_in."""
    return env.calls_in(text, max_calls, replies)


def policy_mask(completion_mask: torch.Tensor, tool_mask: torch.Tensor | None) -> torch.Tensor:
    """The tokens the policy loss, the KL and the entropy act on: the completion's, less the environment's (TRL's
    completion_mask * tool_mask). The model still reads the environment's tokens: the forward feeds every token
    before a row's last marked one (tiny_lm/grouped_layout.py; the generic forward feeds them all)."""
    return completion_mask if tool_mask is None else completion_mask * ~tool_mask


def tool_use(cfg, tokenizer) -> ToolUse | None:
    """The run's environment (`environment`, capped by `max_tool_calling_iterations`) as decoding uses it; None
    without one."""
    if cfg.environment is None:
        return None
    from tinygrpo.rollout.environment import get_environment

    env = get_environment(cfg.environment)
    cap = env.max_calls if cfg.max_tool_calling_iterations is None else cfg.max_tool_calling_iterations
    return ToolUse(env, tokenizer, cap)


class ToolCalls:
    """The tool-call state of the B rows of one decode (rows as the caller numbers them, 0..B-1)."""

    def __init__(
        self,
        env: Environment,
        tokenizer,
        rows: int,
        eos_token_id: int,
        max_calls: int | None = None,
        episodes: list[dict] | None = None,
        answered: dict[str, tuple[int, str]] | None = None,
    ):
        vocab = tokenizer.get_vocab()
        self.env, self.tokenizer = env, tokenizer
        self.open_id = vocab[env.open] if env.open else None  # (None: every text between replies is a call)
        self.end_id, self.eos_id = vocab[env.end], eos_token_id
        self.max_calls = env.max_calls if max_calls is None else max_calls
        self.known = set(vocab)  # (characters: the char tokenizer's vocabulary)
        self.call: list[list[int] | None] = [None] * rows  # the tokens of each row's open call
        self.owed: list[deque[int]] = [deque() for _ in range(rows)]  # reply tokens still to feed
        self.calls = torch.zeros(rows, dtype=torch.long)  # calls answered, per row
        self.failures = torch.zeros(rows, dtype=torch.long)  # of them, answered with the environment's error
        self.outcomes: Counter[str] = Counter()
        self.answered = {} if answered is None else answered  # (the run's tally: ToolUse.answered)
        self.keys: list[tuple[int, int, int]] | None = None  # each row's episode in the worker
        if episodes is not None:
            session = next(_SESSIONS)
            self.keys = [(os.getpid(), session, r) for r in range(rows)]
            for r, reply in enumerate(
                env.episode_ops([("reset", k, row) for k, row in zip(self.keys, episodes, strict=True)])
            ):
                if reply.outcome != "ok":  # (an episode that cannot start ends at once, counted)
                    self.count(f"reset_{reply.outcome}", reply.detail)
                self.owed[r].extend(self._tokens(r, reply, count=False))

    def next_tokens(self, live: torch.Tensor, sampled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(A,) rows still running and the tokens they sampled -> the tokens they are fed and which of them are the
        environment's (A,) bool."""
        tokens, fed = sampled.tolist(), [False] * sampled.numel()
        ended: list[tuple[int, list[int]]] = []  # rows that end a call at this step, and the call's tokens
        for a, r in enumerate(live.tolist()):
            if self.owed[r]:
                tokens[a], fed[a] = self.owed[r].popleft(), True
                continue
            t, call = tokens[a], self.call[r]
            if (
                call is None
                and self.open_id is None
                and t != self.eos_id
                and int(self.calls[r]) < self.max_calls
            ):
                call = self.call[r] = []  # (no `open`: the policy's token opens a call, and is its first)
            if call is None:
                if t == self.open_id and int(self.calls[r]) < self.max_calls:
                    self.call[r] = []
            elif t == self.end_id:
                self.call[r] = None
                ended.append((r, call))
            elif t == self.eos_id:
                self.call[r] = None
            else:
                call.append(t)
        # The step's calls, answered together (one round trip to the environment's worker); fed from the next step.
        texts = [self.tokenizer.decode(call) for _, call in ended]
        if self.keys is None:
            replies = self.env.call_many(texts)
        else:
            replies = self.env.episode_ops(
                [("step", self.keys[r], text) for (r, _), text in zip(ended, texts, strict=True)]
            )
        for (r, _), reply in zip(ended, replies, strict=True):
            self.owed[r].extend(self._tokens(r, reply))
        out = torch.tensor(tokens, dtype=sampled.dtype, device=sampled.device)
        return out, torch.tensor(fed, device=sampled.device)

    def _tokens(self, r: int, reply, count: bool = True) -> list[int]:
        """Row r's reply as token ids, counted; a result the tokenizer cannot write (a sign, a letter) is a failure.
        An episode that is over (done, or at the cap on calls) ends with <eos>, the environment's token."""
        text, outcome = reply.text, reply.outcome
        detail = reply.detail
        if any(c not in self.known for c in text):
            text, outcome = self.env.failed("unwritable").text, "unwritable"
            detail = f"{reply.text[:40]!r} holds characters the tokenizer cannot write"
        if count:
            self.calls[r] += 1
            self.failures[r] += outcome != "ok"
            self.count(outcome, detail)
        ids = self.tokenizer.convert_tokens_to_ids(list(text))
        if self.keys is not None and (reply.done or int(self.calls[r]) >= self.max_calls):
            ids.append(self.eos_id)
        return ids

    def environments(self) -> list[Any] | None:
        """Each row's environment instance, as its episode left it (TRL's `environments`, for the reward
        functions); None for a row whose instance was lost or cannot be sent (counted). None without episodes."""
        if self.keys is None:
            return None
        out = self.env.episode_ops([("collect", k) for k in self.keys])
        if lost := sum(x is None for x in out):
            self.count("lost_instance", "an instance that cannot be pickled, or its worker was killed", lost)
        return out

    def count(self, outcome: str, detail: str = "", n: int = 1) -> None:
        """An outcome, counted for this decode and in the run's tally (which its errors quote)."""
        self.outcomes[outcome] += n
        seen, first = self.answered.get(outcome, (0, detail))
        self.answered[outcome] = (seen + n, first or detail)


def failures_line(name: str, answered: dict[str, tuple[int, str]]) -> str:
    """An environment's failures in a tally, in words ("" when none failed)."""
    failed = [f"{o} {n} times" + (f" ({d})" if d else "") for o, (n, d) in answered.items() if o != "ok"]
    return f"the environment {name} answered {', '.join(failed)}" if failed else ""


_SESSIONS = itertools.count()  # (episode keys: unique in this process, whichever worker holds them)
