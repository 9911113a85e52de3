"""The run's JSON-lines logs (metrics.jsonl, completions.jsonl and the evaluation details): writing them, the one
reader of them, cutting them back on resume.

A log is written one complete line at a time (JsonlWriter), so the only damage a kill or a full disk can do is a torn
last line: the line was cut mid-write and has no trailing newline. The reader drops that line and nothing else; any
other line that is not a JSON object is an error naming the file and the line, since it was not written by a
JsonlWriter (an edited, truncated-and-appended or foreign file) and silently skipping it would misreport the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tinygrpo.base.files import append_whole, write_atomic
from tinygrpo.run.config import ConfigError

if TYPE_CHECKING:
    pass
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from tinygrpo.algorithm.core import entropy_from_logits, selective_log_softmax
from tinygrpo.algorithm.group_sizes import unit_group
from tinygrpo.model.backend import Backend
from tinygrpo.rollout.round import Round, ScoredBatch
from tinygrpo.rollout.sampling import completion_logits

TIMING_PREFIXES = ("time/", "throughput/")  # the only keys that may differ between identical runs
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


class JsonlError(ConfigError):
    """A JSON-lines log that cannot be read, with its file and line number. A ConfigError, so that train_grpo.py
    (on resume) and `python -m tinygrpo.run.report` print it as one `error:` line."""


class JsonlWriter:
    """Appends one JSON object per line, flushed at once (a killed run keeps every line it wrote); a line that cannot
    be written whole is not written at all (writes.append_whole)."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path = Path(path)
        self.enabled = enabled

    def write(self, obj: dict) -> None:
        if self.enabled:
            append_whole(self.path, (json.dumps(obj, sort_keys=True) + "\n").encode())


def read_jsonl_lines(path: Path) -> list[tuple[int, bytes, dict]]:
    """(line number, the line as written, its object) for each line of a JSON-lines file, in order; [] when the file
    does not exist. Blank lines are skipped; a torn last line (no trailing newline, does not parse) is dropped;
    any other line that does not parse, or parses to something other than an object, raises JsonlError."""
    path = Path(path)
    if not path.is_file():
        return []
    # the last item is b"" unless the file ends in an unterminated line
    lines = path.read_bytes().split(b"\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:  # (bytes are decoded as UTF-8: a bad byte is a UnicodeDecodeError, a ValueError too)
            obj = json.loads(line)
        except ValueError as e:
            if number == len(lines):  # cut mid-write (a kill, a full disk): the lines before it are whole
                break
            what = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
            raise JsonlError(f"{path} line {number}: not JSON ({what})") from None
        if not isinstance(obj, dict):
            kind = _JSON_TYPES.get(type(obj), "null")
            raise JsonlError(f"{path} line {number}: {kind} where a JSON object belongs")
        rows.append((number, line, obj))
    return rows


def read_jsonl(path: Path) -> list[dict]:
    """The objects of a JSON-lines log (see read_jsonl_lines for what is dropped and what is an error)."""
    return [obj for _, _, obj in read_jsonl_lines(path)]


def truncate_after_step(path: Path, step: int) -> None:
    """Drop lines logged after `step` (on resume, those steps are about to be redone), and a torn last line: the
    rewritten file holds complete lines only, so the resumed run's first line does not land on a cut one. Lines
    without a step are kept; the lines kept are copied byte for byte."""
    path = Path(path)
    if not path.is_file():
        return
    kept = []
    for number, line, obj in read_jsonl_lines(path):
        s = obj.get("step", 0)
        if not isinstance(s, int | float) or isinstance(s, bool):
            raise JsonlError(f"{path} line {number}: 'step' is {json.dumps(s)[:40]}, not a number")
        if s <= step:
            kept.append(line + b"\n")
    write_atomic(path, b"".join(kept))


# ----------------------------------------------------------------------------------------------- checked rows
# A reader of a log (the report) says what it needs of each row: the keys it indexes and the kind of each value it
# formats or draws. A row that lacks one is a JsonlError naming the file and the line, not a KeyError or TypeError
# from deep inside the reader.

Check = tuple[Callable[[object], bool], str]  # (test of a value, what the value should be)
INT: Check = (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
NUM: Check = (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number")
NUM_OR_NULL: Check = (lambda v: v is None or NUM[0](v), "a number or null")
STR: Check = (lambda v: isinstance(v, str), "a string")


def list_of(check: Check) -> Check:
    return (lambda v: isinstance(v, list) and all(check[0](x) for x in v), f"a list, each item {check[1]}")


def by_name(check: Check) -> Check:
    return (
        lambda v: isinstance(v, dict) and all(check[0](x) for x in v.values()),
        f"an object, each value {check[1]}",
    )


class Shape(NamedTuple):
    """What each row of a log must hold: `required` keys, and the kind of value of these and of `optional` ones
    (an optional key ending in "/" stands for every key it begins); `same_length`: a list key whose length must be
    the same in every row (the columns of one heatmap)."""

    required: dict[str, Check]
    optional: dict[str, Check] = {}  # (one dict shared by the Shapes that omit it: never mutated)
    same_length: str = ""


def read_checked(path: Path, shape: Shape) -> list[dict]:
    """read_jsonl, each row checked against `shape`: the first row that does not fit raises JsonlError."""
    prefixes = [(k, c) for k, c in shape.optional.items() if k.endswith("/")]
    rows: list[dict] = []
    for number, _, row in read_jsonl_lines(path):
        where = f"{path} line {number}"
        if missing := [k for k in shape.required if k not in row]:
            raise JsonlError(f"{where}: no {missing[0]!r} in the row")
        for key, value in row.items():
            check = shape.required.get(key) or shape.optional.get(key)
            check = check or next((c for p, c in prefixes if key.startswith(p)), None)
            if check is not None and not check[0](value):
                shown = json.dumps(value)
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                raise JsonlError(f"{where}: {key!r} should be {check[1]}, not {shown}")
        if shape.same_length and rows and len(row[shape.same_length]) != len(rows[0][shape.same_length]):
            n, first = len(row[shape.same_length]), len(rows[0][shape.same_length])
            raise JsonlError(f"{where}: {shape.same_length!r} has {n} items, the first row {first}")
        rows.append(row)
    return rows


DETAIL_FILES = ("prompt_stats", "eval_failures", "beliefs")  # <name>.jsonl, written at every evaluation
MAX_BELIEF_PROMPTS, MAX_BELIEF_ANSWERS = 64, 32  # beliefs are logged for problem sets this small


# The per-token lists of a completions.jsonl row (StepTokens), one item per completion token (<eos> included).
TOKEN_KEYS = ("tokens", "token_advantage", "token_p_old", "token_p_new", "token_ratio", "token_entropy")


@dataclass(frozen=True)
class TokenProbs:
    """A policy's view of the tokens of a round's first k completions, at the run's temperature (as the loss sees
    them). Positions past a completion's last token are 0."""

    logp: torch.Tensor  # (k, Tc) log-probability of each sampled token
    entropy: torch.Tensor  # (k, Tc) entropy of the distribution the token was drawn from


def logged_rows(first: Round, count: int) -> list[int]:
    """The rows of the first round a step logs: whole groups, those with signal (advantages not all equal: what the
    update learns from, and what the report's token pictures are for) before the others, each in sampling order, up
    to `count` rows."""
    G = first.completion_ids.size(0) // len(first.idx)
    signal = first.has_signal.tolist() if first.has_signal is not None else [False] * len(first.idx)
    groups = range(len(first.idx))
    order = [g for g in groups if signal[g]] + [g for g in groups if not signal[g]]
    return [g * G + j for g in order for j in range(G)][:count]


@torch.inference_mode()
def token_probs(
    model: nn.Module, backend: Backend, first: Round, rows: list[int], temperature: float
) -> TokenProbs:
    """One forward of `model` on the completions `rows` of `first` (logged_rows: whole groups), without gradients.
    Changes nothing about training: no generator is drawn from (a model with dropout runs in eval mode, as it
    samples, and its mode is restored) and the weights are only read. Row r of the result is completion rows[r]."""
    G = first.completion_ids.size(0) // len(first.idx)
    groups = list(dict.fromkeys(r // G for r in rows))  # (in order, once each)
    whole = torch.tensor([g * G + j for g in groups for j in range(G)], device=first.completion_ids.device)
    ids = first.completion_ids[whole]  # (groups*G, Tc)
    # Every sampled token, also of a truncated completion that mask_truncated_completions leaves out of the loss.
    mask = (torch.arange(ids.size(1), device=ids.device) < first.lengths[whole, None]).float()
    switch = model.training and not backend.mode_independent
    if switch:
        model.eval()
    try:
        gidx = torch.tensor(groups, device=first.prompt_ids.device)
        logits = completion_logits(
            model, first.prompt_ids[gidx], first.prompt_mask[gidx], ids, G, mask, backend
        )
    finally:
        if switch:
            model.train()
    # rows are whole groups in that order, so they are the first k rows of the layout (the last group may be cut)
    k = len(rows)
    logp = selective_log_softmax(logits[:k], ids[:k], temperature) * mask[:k]
    entropy = entropy_from_logits(logits[:k], temperature) * mask[:k]
    return TokenProbs(logp.to("cpu", copy=True), entropy.to("cpu", copy=True))


def token_texts(tokenizer, first: Round, rows: list[int]) -> list[list[str]]:
    """Each completion `rows` of `first` as its tokens, decoded one at a time (<eos> kept)."""
    ids, lengths = first.completion_ids.tolist(), first.lengths.tolist()
    return [
        tokenizer.batch_decode([[t] for t in ids[r][: lengths[r]]], skip_special_tokens=False) for r in rows
    ]


@dataclass(frozen=True)
class StepTokens:
    """What one step's update did to the tokens of its logged completions (logged_rows of its first round)."""

    rows: list[int]  # the first round's rows they are, in the order logged
    texts: list[list[str]]  # each completion's tokens (token_texts)
    before: TokenProbs  # the policy that sampled them (before the update)
    after: TokenProbs  # the policy after the update


def _sig(x: float) -> float:
    """4 significant digits: small probabilities keep their relative precision, the log stays small."""
    return float(f"{x:.4g}")


class RunLogs:
    def __init__(self, out: Path, enabled: bool) -> None:
        self.out = out
        self.names = ("metrics", "completions", "warnings", *DETAIL_FILES)
        self.files = {name: JsonlWriter(out / f"{name}.jsonl", enabled=enabled) for name in self.names}

    def truncate_after(self, step: int) -> None:
        """On resume: drop what was logged after the checkpoint's step (those steps are about to be redone)."""
        for name in self.names:
            truncate_after_step(self.out / f"{name}.jsonl", step)

    def metrics(self, step: int, metrics: dict) -> None:
        self.files["metrics"].write({"step": step, **metrics})

    def warning(self, step: int, line: str) -> None:
        """A line the run said about itself (tinygrpo/run/watch.py): the report shows it beside the summary."""
        self.files["warnings"].write({"step": step, "warning": line})

    def completions(
        self,
        step: int,
        scored: ScoredBatch,
        reward_names: list[str],
        count: int,
        answers: list | None,
        tokens: StepTokens | None = None,
    ) -> None:
        """`count` samples of the step's first round (logged_rows: whole groups, those with signal first): prompt,
        its group (the first round's index: what the report groups by), completion, each reward function's value, the
        combined reward, the advantage and (when the data has one) the gold answer; with `tokens`, per token
        (TOKEN_KEYS): its text, the completion's advantage on every token of its completion mask (0 on a truncated
        completion that mask_truncated_completions leaves out; a loss that weights tokens further, such as
        top_entropy_quantile, is not shown), its probability under the policy that sampled it and under the policy
        after the update, their ratio new / old, and the entropy of the updated policy at its position; with an
        environment, `token_tool`: 1 for the tokens it fed (their advantage is 0: the loss leaves them out)."""
        first = scored.first
        G = first.completion_ids.size(0) // len(first.idx)
        for r, i in enumerate(tokens.rows if tokens is not None else logged_rows(first, count)):
            values = first.rewards_per_func[i].tolist()
            rewards = {
                name: (None if math.isnan(v) else v) for name, v in zip(reward_names, values, strict=True)
            }
            reward = float(first.rewards[i])
            row = {
                "step": step,
                "group": i // G if first.sizes is None else int(unit_group(first.sizes)[i // G]),
                "prompt": first.prompts[i],
                "completion": first.completions[i],
            }
            row |= {"rewards": rewards, "reward": None if math.isnan(reward) else reward}
            row["advantage"] = float(first.advantages[i])
            if answers is not None:
                row["answer"] = answers[first.idx[i // G]]
            if tokens is not None:
                row |= _token_columns(first, tokens, r, i)
            self.files["completions"].write(row)

    def evaluation(
        self,
        step: int,
        pass_rate: torch.Tensor,
        rows: dict,
        completions: list[str],
        right: list[bool],
        beliefs: Callable[[list[str]], torch.Tensor],
    ) -> None:
        """At an evaluation: every training prompt's pass-rate estimate, the held-out problems answered wrong (rows:
        the held-out split's columns; completions: the greedy ones; right: the verifier's judgement of each), and, on a small problem set, the policy's belief
        in each answer (`beliefs(answers)` -> (P, C) probabilities): the report's per-prompt pictures."""
        rates = [None if r != r else round(r, 3) for r in pass_rate.tolist()]
        self.files["prompt_stats"].write({"step": step, "pass_rate": rates})
        wrong = [
            [p, str(a), c]
            for p, a, c, ok in zip(rows["prompt"], rows["answer"], completions, right, strict=True)
            if not ok
        ]
        self.files["eval_failures"].write({"step": step, "total": len(completions), "failures": wrong})
        answers = sorted({str(a) for a in rows["answer"]}, key=lambda a: (len(a), a))
        if len(completions) <= MAX_BELIEF_PROMPTS and len(answers) <= MAX_BELIEF_ANSWERS:
            probs = beliefs(answers)
            row = {"step": step, "questions": rows["prompt"], "answers": answers}
            row["gold"] = [str(a) for a in rows["answer"]]
            self.files["beliefs"].write({**row, "probs": [[round(x, 4) for x in r] for r in probs.tolist()]})


def _token_columns(first: Round, tokens: StepTokens, r: int, i: int) -> dict[str, list]:
    """The per-token lists (TOKEN_KEYS) of the r-th logged completion, row i of the first round, rounded to 4
    significant digits."""
    n = int(first.lengths[i])
    adv = (first.advantages[i] * first.completion_mask[i, :n].cpu()).tolist()
    old, new = tokens.before.logp[r, :n], tokens.after.logp[r, :n]
    columns = (adv, old.exp(), new.exp(), (new - old).exp(), tokens.after.entropy[r, :n])
    row = {"tokens": tokens.texts[r]} | {
        k: [_sig(float(x)) for x in c] for k, c in zip(TOKEN_KEYS[1:], columns, strict=True)
    }
    if first.tool_mask is not None:  # which tokens the environment fed (context the loss leaves out)
        row["token_tool"] = [int(x) for x in first.tool_mask[i, :n].tolist()]
    return row


class ProgressBar:
    """The run's progress bar (main process): the step's sampled reward and the latest held-out accuracy."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.bar = tqdm(total=total, initial=initial, disable=not enabled, desc="grpo", dynamic_ncols=True)
        self.held_out: float | None = None

    def say(self, line: str) -> None:
        """A line on stderr that the bar redraws below."""
        self.bar.write(line, file=sys.stderr)

    def update(self, metrics: dict, steps: int = 1) -> None:
        self.held_out = metrics.get("eval/accuracy", self.held_out)
        post = {"reward": f"{metrics['reward']:.3f}"}
        if self.held_out is not None:
            post["held_out"] = f"{self.held_out:.3f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()
