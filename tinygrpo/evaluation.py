"""Held-out evaluation with one correctness rule, the strict verifier's (`rewards.accuracy`): greedy accuracy and
pass@k. The SFT script, the trainer and the studies all evaluate through here."""

from __future__ import annotations

import torch

from rewards import accuracy

from .backend import Backend
from .rollout import completion_logits, decode_completions, sample_completions


def accuracy_rate(completions: list[str], answers: list) -> float:
    """Fraction of completions the strict verifier accepts (the answer as an integer, then <eos>)."""
    return sum(accuracy(completions=completions, answer=answers)) / max(1, len(answers))


@torch.inference_mode()
def greedy_completions(
    model: torch.nn.Module,
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new_tokens: int,
    backend: Backend | None = None,
) -> list[str]:
    """Greedy completions of (P, Tp) left-padded prompts, decoded with <eos> kept ("85<eos>"; truncated: no <eos>)."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ro = sample_completions(
        model, prompt_ids, prompt_mask, 1, max_new_tokens, eos, pad, temperature=0.0, backend=backend
    )
    return decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)


def greedy_accuracy(
    model: torch.nn.Module,
    tokenizer,
    prompts: list[str],
    answers: list,
    max_new_tokens: int,
    batch_size: int = 1024,
) -> tuple[float, list[str]]:
    """Greedy accuracy of a list of prompt texts (tokenized in batches), and the completions themselves."""
    outs: list[str] = []
    for i in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[i : i + batch_size], padding=True, return_tensors="pt")
        outs += greedy_completions(model, tokenizer, enc["input_ids"], enc["attention_mask"], max_new_tokens)
    return accuracy_rate(outs, answers), outs


@torch.inference_mode()
def held_out_metrics(
    model: torch.nn.Module,
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    answers: list,
    *,
    max_new_tokens: int,
    pass_k: int = 0,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    backend: Backend | None = None,
    kinds: dict[str, list[bool]] | None = None,
    completions_out: list[str] | None = None,
) -> dict[str, float]:
    """(P, Tp) left-padded prompts -> {"eval/accuracy": greedy exact-match rate, "eval/pass@k": any of k samples}.

    pass@k samples with its own generator seeded by `seed`, so evaluating never moves the training RNG. `kinds`
    (name -> which prompts are of that kind) adds "eval/accuracy/<name>", the greedy accuracy on those prompts.
    `completions_out`, when given, receives the greedy completions (decoded, <eos> kept).
    """
    outs = greedy_completions(model, tokenizer, prompt_ids, prompt_mask, max_new_tokens, backend)
    if completions_out is not None:
        completions_out[:] = outs
    right = accuracy(completions=outs, answer=answers)
    res = {"eval/accuracy": sum(right) / max(1, len(answers))}
    for name, member in (kinds or {}).items():
        hits = [r for r, m in zip(right, member, strict=True) if m]
        if hits:
            res[f"eval/accuracy/{name}"] = sum(hits) / len(hits)
    if pass_k:
        eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
        gen = torch.Generator().manual_seed(seed)
        ro = sample_completions(
            model,
            prompt_ids,
            prompt_mask,
            pass_k,
            max_new_tokens,
            eos,
            pad,
            temperature,
            top_k,
            top_p,
            gen,
            backend,
        )
        outs = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        hits = torch.tensor(accuracy(completions=outs, answer=[a for a in answers for _ in range(pass_k)]))
        res[f"eval/pass@{pass_k}"] = float(hits.view(-1, pass_k).amax(1).sum()) / len(answers)
    return res


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
