"""Held-out evaluation with one correctness rule, the task's verifier (`Verifier`: on addition the strict
`rewards.accuracy`): greedy accuracy and pass@k. The SFT script, the trainer (HeldOutEvaluator) and the studies all
evaluate through here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rewards import accuracy, compute_rewards, resolve_reward
from tinygrpo.data.task import Formats
from tinygrpo.model.backend import Backend
from tinygrpo.model.text import decode_completions
from tinygrpo.rollout.prompts import left_pad
from tinygrpo.rollout.sampling import SamplingParams, completion_logits, sample_completions
from tinygrpo.rollout.tool_calls import ToolUse


@dataclass(frozen=True)
class Verifier:
    """The rule that decides whether a completion is right: a reward with TRL's signature that scores 1.0 right and
    0.0 wrong, called with the split's columns (a None or any other score is wrong); `kinds` breaks accuracy down
    by kind of problem, `formats` by the form of the completion. `Verifier.of(dataset)` is the dataset's task's
    verifier (tinygrpo/data/task.py)."""

    name: str = "accuracy"
    fn: Callable[..., Any] = accuracy
    kinds: Callable[[dict[str, list]], dict[str, list[bool]]] | None = field(default=None, compare=False)
    formats: Formats | None = field(default=None, compare=False)
    target: str = (
        "answer"  # the column whose text, then <eos>, is a right completion (the start-up gold check)
    )

    @classmethod
    def of(cls, dataset: str, eval_reward: str | None = None, task: str | None = None) -> Verifier:
        """The verifier `choose` picks."""
        return cls.choose(dataset, eval_reward, task)[0]

    @classmethod
    def choose(
        cls, dataset: str, eval_reward: str | None = None, task: str | None = None
    ) -> tuple[Verifier, str]:
        """The rule held-out accuracy is decided by, and where the choice came from: `eval_reward` when given, else
        the `correct` reward of the task named (a run's `task`: formats of one problem set may be read by different
        verifiers) or of the dataset's task, else the strict integer rule (`accuracy`) for data no task names.
        Kinds, formats and the target column are the task's either way."""
        from tinygrpo.data.task import get_task, task_of_dataset

        named = get_task(task) if task else task_of_dataset(dataset)
        kinds, formats = (named.kinds, named.formats) if named is not None else (None, None)
        target = named.target if named is not None else "answer"
        if eval_reward:
            return cls(eval_reward, resolve_reward(eval_reward), kinds, formats, target), "--eval_reward"
        if named is None:
            return cls(), "the default for data no task names; --eval_reward chooses another"
        return cls(
            named.correct, resolve_reward(named.correct), kinds, formats, target
        ), f"the task {named.name}'s verifier"

    def __call__(self, completions: list[str], rows: dict[str, list], k: int = 1) -> list[bool]:
        """Whether each completion is right; rows[c][i] are the columns of completions[i * k : (i + 1) * k]."""
        n = len(completions)
        cols = {c: [v for v in vals for _ in range(k)] for c, vals in rows.items() if c != "prompt"}
        prompts = [p for p in rows["prompt"] for _ in range(k)] if "prompt" in rows else [""] * n
        ids = [[] for _ in range(n)]  # (correctness is a property of the text; no verifier reads the ids)
        scores = compute_rewards([self.fn], [self.name], prompts, completions, ids, cols)[:, 0]
        return (np.nan_to_num(scores) == 1.0).tolist()


def format_counts(formats: Formats, completions: list[str], right: list[bool]) -> torch.Tensor:
    """(2, F) float: how many completions take each of the F formats (row 0) and how many of those are right (row
    1), in `formats.names` order: counts, so that processes can add theirs before the shares are taken."""
    index = {name: i for i, name in enumerate(formats.names)}
    counts = torch.zeros(2, len(index))
    for c, ok in zip(completions, right, strict=True):
        name = formats.of(c)
        if name not in index:  # (a task's detector and its list of names disagree: a defect of the task file)
            raise ValueError(
                f"the format detector named {name!r} for the completion {c!r}, not one of {', '.join(formats.names)}"
            )
        f = index[name]
        counts[0, f] += 1
        counts[1, f] += ok
    return counts


def format_metrics(prefix: str, formats: Formats, counts: torch.Tensor) -> dict[str, float]:
    """ "<prefix>format/<name>": the share of completions in each format, and "<prefix>format_accuracy/<name>": the
    share of those that are right (for a format some completion took), from format_counts' (2, F) counts."""
    total = float(counts[0].sum())
    m = {f"{prefix}format/{n}": float(counts[0, i]) / max(total, 1) for i, n in enumerate(formats.names)}
    for i, name in enumerate(formats.names):
        if counts[0, i] > 0:
            m[f"{prefix}format_accuracy/{name}"] = float(counts[1, i] / counts[0, i])
    return m


@torch.inference_mode()
def greedy_completions(
    model: torch.nn.Module,
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new_tokens: int,
    backend: Backend | None = None,
    tools: ToolUse | None = None,
) -> list[str]:
    """Greedy completions of (P, Tp) left-padded prompts, decoded with <eos> kept ("85<eos>"; truncated: no <eos>);
    with `tools`, the environment's replies are in them, as the policy read them."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    greedy = SamplingParams.greedy(max_new_tokens)
    ro = sample_completions(
        model,
        prompt_ids,
        prompt_mask,
        1,
        greedy,
        eos_token_id=eos,
        pad_token_id=pad,
        backend=backend,
        tools=tools,
    )
    return decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)


def greedy_accuracy(
    model: torch.nn.Module,
    tokenizer,
    rows: dict[str, list],
    max_new_tokens: int,
    verifier: Verifier | None = None,
    batch_size: int = 1024,
    tools: ToolUse | None = None,
) -> tuple[float, list[str]]:
    """Greedy accuracy on a split's rows ({column: values}, with "prompt"; tokenized in batches) under `verifier`
    (default: the strict integer rule), and the completions themselves."""
    prompts, verifier = rows["prompt"], verifier or Verifier()
    outs: list[str] = []
    for i in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[i : i + batch_size], padding=True, return_tensors="pt")
        part = None if tools is None else tools.with_rows(rows, range(i, min(i + batch_size, len(prompts))))
        outs += greedy_completions(
            model, tokenizer, enc["input_ids"], enc["attention_mask"], max_new_tokens, tools=part
        )
    return sum(verifier(outs, rows)) / max(1, len(prompts)), outs


@dataclass(frozen=True)
class HeldOut:
    """One held-out evaluation: its metrics and the greedy completions they were computed from."""

    # "eval/accuracy", "eval/accuracy/<kind>", "eval/pass@k"; with formats "eval/format/<name>",
    # "eval/format_accuracy/<name>", "eval/mean_length"
    metrics: dict[str, float]
    completions: list[str]  # the greedy completion of each prompt, in order (decoded, <eos> kept)
    right: list[bool]  # whether the verifier accepted each of them


@torch.inference_mode()
def held_out_metrics(
    model: torch.nn.Module,
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    rows: dict[str, list],
    params: SamplingParams,
    *,
    pass_k: int = 0,
    backend: Backend | None = None,
    verifier: Verifier | None = None,
    tools: ToolUse | None = None,
    sampled_accuracy: bool = False,
) -> HeldOut:
    """(P, Tp) left-padded prompts -> {"eval/accuracy": greedy exact-match rate, "eval/pass@k": any of k samples}
    and the greedy completions.

    Greedy decoding and pass@k both stop at `params.max_new_tokens`; pass@k samples as `params` says, drawing from
    `params.generator`, which must be the caller's own (seeded) generator so that evaluating never moves the
    training RNG. `rows` are the prompts' columns ({column: values}, one per prompt) that `verifier` (default: the
    strict integer rule) reads; its `kinds` add "eval/accuracy/<kind>", the greedy accuracy on those prompts, and
    its `formats` the share of the greedy completions in each format, the accuracy within each and their mean length.
    `sampled_accuracy` adds "eval/sampled_accuracy", the mean over the pass@k samples (TRL's sampled evaluation).
    """
    verifier = verifier or Verifier()
    tools = None if tools is None else tools.with_rows(rows)  # (an episode's environment starts from its row)
    if pass_k and params.generator is None:
        # torch's global generator would serve: an evaluation that changes what training samples next.
        raise ValueError("pass@k needs its own generator (params.generator), not torch's global one")
    outs = greedy_completions(
        model, tokenizer, prompt_ids, prompt_mask, params.max_new_tokens, backend, tools
    )
    right, n = verifier(outs, rows), len(outs)
    res = {"eval/accuracy": sum(right) / max(1, n)}
    kinds = verifier.kinds(rows) if verifier.kinds is not None else {}
    for name, member in kinds.items():
        hits = [r for r, m in zip(right, member, strict=True) if m]
        if hits:
            res[f"eval/accuracy/{name}"] = sum(hits) / len(hits)
    # What form the greedy completions take, how long they are, which are right.
    if verifier.formats is not None:
        res.update(format_metrics("eval/", verifier.formats, format_counts(verifier.formats, outs, right)))
        # (their tokens counted again from the text: exact for a tokenizer that round-trips, as tiny_lm's does)
        lengths = [len(ids) for ids in tokenizer(outs)["input_ids"]] if outs else [0]
        res["eval/mean_length"] = sum(lengths) / len(lengths)
    if pass_k:
        eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
        ro = sample_completions(
            model,
            prompt_ids,
            prompt_mask,
            pass_k,
            params,
            eos_token_id=eos,
            pad_token_id=pad,
            backend=backend,
            tools=tools,
        )
        samples = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        hits = torch.tensor(verifier(samples, rows, k=pass_k), dtype=torch.float32)
        res[f"eval/pass@{pass_k}"] = float(hits.view(-1, pass_k).amax(1).sum()) / n
        if sampled_accuracy:
            res["eval/sampled_accuracy"] = float(hits.mean())
    return HeldOut(res, outs, right)


@torch.no_grad()
def answer_beliefs(
    model: torch.nn.Module,
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    candidates: list[str],
    backend: Backend | None = None,
) -> torch.Tensor:
    """(P, Tp) left-padded prompts, C candidate answers -> (P, C) the policy's probability of each answer followed by
    <eos> (teacher forcing at temperature 1: what the policy believes, the token-level row of a table)."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ids = [tokenizer(c)["input_ids"] + [eos] for c in candidates]
    T = max(map(len, ids))
    comp = torch.tensor([x + [pad] * (T - len(x)) for x in ids])  # (C, T)
    mask = torch.tensor([[1.0] * len(x) + [0.0] * (T - len(x)) for x in ids])
    P, C = prompt_ids.size(0), len(candidates)
    comp, mask = comp.repeat(P, 1).to(prompt_ids.device), mask.repeat(P, 1).to(prompt_ids.device)  # (P*C, T)
    logits = completion_logits(model, prompt_ids, prompt_mask, comp, C, mask, backend)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, comp[..., None])[..., 0]
    return (logp * mask).sum(1).exp().view(P, C)


class HeldOutEvaluator:
    """The trainer's held-out evaluation: the split's rows, tokenized once on first use, greedy accuracy (and by
    problem kind where the task defines kinds) and pass@k at the step's seed, under the dataset's verifier; the
    latest result is kept for the run's logs."""

    def __init__(
        self,
        rows: dict | None,
        tokenizer,
        backend: Backend,
        cfg,
        verifier: Verifier | None = None,
        tools: ToolUse | None = None,
    ) -> None:
        self.rows = rows if rows is not None and "answer" in rows else None  # (no answers: nothing to score)
        self.tokenizer, self.backend, self.cfg, self.tools = tokenizer, backend, cfg, tools
        self.verifier = verifier or Verifier.of(
            cfg.dataset_name, getattr(cfg, "eval_reward", None), getattr(cfg, "task", None)
        )
        self.prompts: tuple[torch.Tensor, torch.Tensor] | None = None  # (P, Tp) left-padded ids and mask
        self.last: HeldOut | None = None

    def __call__(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        """Metrics of `model` after `step` steps ({} without a held-out split); every process gets the same."""
        if self.rows is None:
            return {}
        if self.prompts is None:
            ids = self.tokenizer(self.rows["prompt"])["input_ids"]
            device = next(model.parameters()).device
            self.prompts = tuple(t.to(device) for t in left_pad(ids, self.tokenizer.pad_token_id))
        cfg = self.cfg
        # pass@k's own generator, seeded by the step: evaluating never moves the training RNG.
        gen = torch.Generator().manual_seed(cfg.seed + 7919 * (step + 1))
        params = SamplingParams(
            cfg.max_completion_length,
            cfg.temperature,
            cfg.top_k,
            cfg.top_p,
            gen,
            min_p=getattr(cfg, "min_p", 0.0),
            repetition_penalty=getattr(cfg, "repetition_penalty", 1.0),
        )
        self.last = held_out_metrics(
            model,
            self.tokenizer,
            *self.prompts,
            self.rows,
            params,
            pass_k=cfg.eval_pass_k,
            sampled_accuracy=getattr(cfg, "num_generations_eval", None) is not None,
            backend=self.backend,
            verifier=self.verifier,
            tools=self.tools,
        )
        return self.last.metrics

    def beliefs(self, model: torch.nn.Module, answers: list[str]) -> torch.Tensor:
        """(P, C) the policy's probability of each candidate answer for each held-out prompt (answer_beliefs)."""
        return answer_beliefs(model, self.tokenizer, *self.prompts, answers, self.backend)
