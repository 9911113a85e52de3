"""Tool calls inside one decode: each row's open call, its calls so far and the reply it is being fed.

`ToolCalls.next_tokens` sits in the decoding loop (tinygrpo/rollout/sampling.py) between sampling and feeding: a row that is
owed a reply gets the reply's next token in place of the one it sampled (the environment's token, marked in the
rollout's `tool_mask`); any other row keeps its sample, which may open a call, add to one, or end one, whose reply
then starts on the next step. The rows stay in the one batched decode, so the grouped fast path still shares each
prompt across its samples, on either backend.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import torch

from .environment import Environment


@dataclass(frozen=True)
class ToolUse:
    """An environment as decoding uses it: with the run's tokenizer and cap on calls. `session(B)` gives the state
    of one decode of B rows."""

    env: Environment
    tokenizer: Any
    max_calls: int

    def session(self, rows: int) -> ToolCalls:
        return ToolCalls(self.env, self.tokenizer, rows, self.tokenizer.eos_token_id, self.max_calls)


def written_calls(text: str, env: Environment, max_calls: int) -> list[tuple[str, int, int]]:
    """The calls of a text written out whole (an SFT target such as "<37*48=1776>1776"), read as decoding reads
    them: each answered call's text and where its reply lies, (call, start, stop) with text[start:stop] the reply
    (up to and including `close`, or the end of the text)."""
    out, at, calls = [], 0, 0
    while calls < max_calls:
        start = text.find(env.open, at)
        if start < 0:
            break
        end = text.find(env.end, start + 1)
        if end < 0:
            break
        stop = text.find(env.close, end + 1)
        stop = len(text) if stop < 0 else stop + 1
        out.append((text[start + 1 : end], end + 1, stop))
        at, calls = stop, calls + 1
    return out


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
    from .environment import get_environment

    env = get_environment(cfg.environment)
    cap = env.max_calls if cfg.max_tool_calling_iterations is None else cfg.max_tool_calling_iterations
    return ToolUse(env, tokenizer, cap)


class ToolCalls:
    """The tool-call state of the B rows of one decode (rows as the caller numbers them, 0..B-1)."""

    def __init__(
        self, env: Environment, tokenizer, rows: int, eos_token_id: int, max_calls: int | None = None
    ):
        vocab = tokenizer.get_vocab()
        self.env, self.tokenizer = env, tokenizer
        self.open_id, self.end_id, self.eos_id = vocab[env.open], vocab[env.end], eos_token_id
        self.max_calls = env.max_calls if max_calls is None else max_calls
        self.known = set(vocab)  # (characters: the char tokenizer's vocabulary)
        self.call: list[list[int] | None] = [None] * rows  # the tokens of each row's open call
        self.owed: list[deque[int]] = [deque() for _ in range(rows)]  # reply tokens still to feed
        self.calls = torch.zeros(rows, dtype=torch.long)  # calls answered, per row
        self.failures = torch.zeros(rows, dtype=torch.long)  # of them, answered with the environment's error
        self.outcomes: Counter[str] = Counter()

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
        replies = self.env.call_many([self.tokenizer.decode(call) for _, call in ended])
        for (r, _), reply in zip(ended, replies, strict=True):
            self.owed[r].extend(self._reply_tokens(r, reply))
        out = torch.tensor(tokens, dtype=sampled.dtype, device=sampled.device)
        return out, torch.tensor(fed, device=sampled.device)

    def _reply_tokens(self, r: int, reply) -> list[int]:
        """Row r's reply as token ids, counted; a result the tokenizer cannot write (a sign, a letter) is a failure."""
        text, outcome = reply.text, reply.outcome
        if any(c not in self.known for c in text):
            text, outcome = self.env.failed("unwritable").text, "unwritable"
        self.calls[r] += 1
        self.failures[r] += outcome != "ok"
        self.outcomes[outcome] += 1
        return self.tokenizer.convert_tokens_to_ids(list(text))
