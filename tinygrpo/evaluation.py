"""Held-out evaluation: greedy accuracy and pass@k with the strict verifier."""

from __future__ import annotations

import torch

from rewards import accuracy

from .rollout import decode_completions, sample_completions


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
    grouped: bool = True,
) -> dict[str, float]:
    """(P, Tp) left-padded prompts -> {"eval/accuracy": greedy exact-match rate, "eval/pass@k": any of k samples}.

    pass@k samples with its own generator seeded by `seed`, so evaluating never moves the training RNG.
    """
    was_training = model.training
    model.eval()
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    ro = sample_completions(model, prompt_ids, prompt_mask, 1, max_new_tokens, eos, pad, temperature=0.0,
                            grouped=grouped)  # fmt: skip
    outs = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
    res = {"eval/accuracy": sum(accuracy(completions=outs, answer=answers)) / len(answers)}
    if pass_k:
        gen = torch.Generator().manual_seed(seed)
        ro = sample_completions(
            model, prompt_ids, prompt_mask, pass_k, max_new_tokens, eos, pad, temperature, top_k, top_p, gen, grouped
        )
        outs = decode_completions(tokenizer, ro.completion_ids, ro.completion_mask)
        hits = torch.tensor(accuracy(completions=outs, answer=[a for a in answers for _ in range(pass_k)]))
        res[f"eval/pass@{pass_k}"] = float(hits.view(-1, pass_k).amax(1).sum()) / len(answers)
    model.train(was_training)
    return res
