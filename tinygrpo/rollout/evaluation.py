"""Held-out evaluation with one correctness rule, the task's verifier (tinygrpo/data/verifier.py: on addition the strict
`rewards.accuracy`): greedy accuracy and pass@k. The SFT script, the trainer (HeldOutEvaluator) and the studies all
evaluate through here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tinygrpo.data.verifier import Verifier, format_counts, format_metrics
from tinygrpo.model.backend import Backend
from tinygrpo.model.text import decode_completions, eos_text
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.prompts import left_pad
from tinygrpo.rollout.sampling import completion_logits, sample_completions
from tinygrpo.rollout.tool_calls import ToolUse


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
    prompts, verifier = rows["prompt"], verifier or Verifier(eos=eos_text(tokenizer))
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
    generator: torch.Generator | None = None,
    *,
    pass_k: int = 0,
    backend: Backend | None = None,
    verifier: Verifier | None = None,
    tools: ToolUse | None = None,
    sampled_accuracy: bool = False,
) -> HeldOut:
    """(P, Tp) left-padded prompts -> {"eval/accuracy": greedy exact-match rate, "eval/pass@k": any of k samples}
    and the greedy completions.

    Greedy decoding and pass@k both stop at `params.max_completion_length`; pass@k samples as `params` says, drawing
    from `generator`, which must be the caller's own (seeded) one so that evaluating never moves the training RNG.
    `rows` are the prompts' columns ({column: values}, one per prompt) that `verifier` (default: the strict integer
    rule) reads; its `kinds` add "eval/accuracy/<kind>", the greedy accuracy on those prompts, and its `formats` the
    share of the greedy completions in each format, the accuracy within each and their mean length.
    `sampled_accuracy` adds "eval/sampled_accuracy", the mean over the pass@k samples (TRL's sampled evaluation).
    """
    verifier = verifier or Verifier(eos=eos_text(tokenizer))
    tools = None if tools is None else tools.with_rows(rows)  # (an episode's environment starts from its row)
    if pass_k and generator is None:
        # torch's global generator would serve: an evaluation that changes what training samples next.
        raise ValueError("pass@k needs its own generator, not torch's global one")
    length = params.max_completion_length
    outs = greedy_completions(model, tokenizer, prompt_ids, prompt_mask, length, backend, tools)
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
        ro = sample_completions(
            model, prompt_ids, prompt_mask, pass_k, params, generator, backend=backend, tools=tools,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
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
    problem kind where the task defines kinds) under the verifier, and pass@k at the step's seed (`pass_k` samples a
    prompt as `sampling` says; `sampled_accuracy`: their mean too); the latest result is kept for the run's logs."""

    def __init__(
        self,
        rows: dict | None,
        tokenizer,
        backend: Backend,
        sampling: SamplingParams,
        verifier: Verifier,
        seed: int,
        pass_k: int = 0,
        sampled_accuracy: bool = False,
        tools: ToolUse | None = None,
    ) -> None:
        self.rows = rows if rows is not None and "answer" in rows else None  # (no answers: nothing to score)
        self.tokenizer, self.backend, self.sampling, self.verifier = tokenizer, backend, sampling, verifier
        self.seed, self.pass_k, self.sampled_accuracy, self.tools = seed, pass_k, sampled_accuracy, tools
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
        # pass@k's own generator, seeded by the step: evaluating never moves the training RNG.
        gen = torch.Generator().manual_seed(self.seed + 7919 * (step + 1))
        self.last = held_out_metrics(
            model,
            self.tokenizer,
            *self.prompts,
            self.rows,
            self.sampling,
            gen,
            pass_k=self.pass_k,
            sampled_accuracy=self.sampled_accuracy,
            backend=self.backend,
            verifier=self.verifier,
            tools=self.tools,
        )
        return self.last.metrics

    def beliefs(self, model: torch.nn.Module, answers: list[str]) -> torch.Tensor:
        """(P, C) the policy's probability of each candidate answer for each held-out prompt (answer_beliefs)."""
        return answer_beliefs(model, self.tokenizer, *self.prompts, answers, self.backend)
