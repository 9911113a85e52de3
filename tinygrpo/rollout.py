"""Batched sampling and completion log-probs for a causal LM, sharing each prompt's keys/values across its group.

GRPO draws G completions of the same prompt. The prompt's keys and values are identical for all G of them, so they
are computed once for the P prompts and repeated G times in the cache (`batch_repeat_interleave`): exact, and
~2.6x less compute on 2-digit addition than running P * G copies of the prompt. The same trick serves the training
and reference forwards (`completion_logits`), where autograd flows through the repeat.
Works with any transformers causal LM whose forward accepts `cache`, `attention_mask` and `logits_to_keep`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from transformers.cache_utils import DynamicCache


@dataclass
class Rollout:
    completion_ids: torch.Tensor  # (P*G, Tc) long, pad after EOS
    completion_mask: torch.Tensor  # (P*G, Tc) 1 for sampled tokens up to and including EOS
    is_eos: torch.Tensor  # (P*G,) bool: the completion ended with EOS (not truncated)


def sample_from_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(B, V) -> (B,) token ids. Temperature 0 is greedy.

    Inverse-CDF sampling (one uniform per row against the cumulative weights) instead of `torch.multinomial`: the
    same distribution, several times cheaper on tiny vocabularies; and exp/sum by hand rather than softmax, which
    is slow on a tiny last dimension on CPU.
    """
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop_sorted = (
            cum - torch.softmax(sorted_logits, dim=-1)
        ) >= top_p  # keep the smallest set reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    weights = torch.exp(logits - logits.max(-1, keepdim=True).values)  # (B, V), unnormalised
    cdf = weights.cumsum(-1)
    u = torch.rand(logits.size(0), 1, generator=generator, device=logits.device) * cdf[:, -1:]
    return (cdf <= u).sum(-1).clamp(max=logits.size(-1) - 1)  # first index whose cdf exceeds u


@torch.inference_mode()
def sample_completions(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    num_generations: int,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> Rollout:
    """prompt_ids/prompt_mask (P, Tp), left-padded -> G completions per prompt, rows grouped by prompt (P*G, Tc).

    One batched decode for all P*G sequences with a KV cache; a sequence stops at EOS (later tokens are pad and
    masked) or at max_new_tokens; decoding ends as soon as every sequence has stopped.
    """
    G = num_generations
    cache = DynamicCache()
    out = model(
        input_ids=prompt_ids, attention_mask=prompt_mask, cache=cache, use_cache=True, logits_to_keep=1
    )
    logits = out.logits[:, -1]  # (P, V)
    if G > 1:
        cache.batch_repeat_interleave(G)
        logits = logits.repeat_interleave(G, dim=0)  # (P*G, V)
    mask = prompt_mask.repeat_interleave(G, dim=0)  # (P*G, Tp)
    B = logits.size(0)
    finished = torch.zeros(B, dtype=torch.bool, device=logits.device)
    tokens = []
    for step in range(max_new_tokens):
        nxt = sample_from_logits(logits, temperature, top_k, top_p, generator)  # (B,)
        nxt = nxt.masked_fill(finished, pad_token_id)
        tokens.append(nxt)
        finished = finished | (nxt == eos_token_id)
        if step == max_new_tokens - 1 or bool(finished.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        out = model(input_ids=nxt[:, None], attention_mask=mask, cache=cache, use_cache=True)
        logits = out.logits[:, -1]
    completion_ids = torch.stack(tokens, dim=1)  # (B, Tc)
    is_eos_tok = completion_ids == eos_token_id
    # Mask: every token up to and including the first EOS.
    after_eos = (is_eos_tok.cumsum(1) - is_eos_tok.long()) > 0
    completion_mask = (~after_eos).long()
    return Rollout(completion_ids, completion_mask, is_eos_tok.any(1))


def completion_logits(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    num_generations: int,
) -> torch.Tensor:
    """Logits that score each completion token: (P, Tp) prompts, (P*G, Tc) completions -> (P*G, Tc, V).

    Position t of the result is the distribution the model gave completion token t. The prompt is run once per
    prompt and its keys/values repeated for the G completions (exact; gradients flow through the repeat).
    Tokens after EOS are fed too (they are masked out of every loss); causality keeps them from touching earlier
    positions.
    """
    G = num_generations
    cache = DynamicCache()
    out = model(
        input_ids=prompt_ids, attention_mask=prompt_mask, cache=cache, use_cache=True, logits_to_keep=1
    )
    first = out.logits.repeat_interleave(G, dim=0)  # (P*G, 1, V): predicts completion token 0
    Tc = completion_ids.size(1)
    if Tc == 1:
        return first
    if G > 1:
        cache.batch_repeat_interleave(G)
    mask = prompt_mask.repeat_interleave(G, dim=0)  # (P*G, Tp)
    mask = torch.cat([mask, torch.ones_like(completion_ids[:, : Tc - 1])], dim=1)  # (P*G, Tp + Tc - 1)
    rest = model(input_ids=completion_ids[:, :-1], attention_mask=mask, cache=cache, use_cache=True).logits
    return torch.cat([first, rest], dim=1)  # (P*G, Tc, V)


@torch.inference_mode()
def greedy_answers(
    model: torch.nn.Module,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int,
    batch_size: int = 1024,
) -> list[str]:
    """Greedy completions for a list of prompts, decoded with <eos> kept (e.g. "85<eos>"; truncated: no <eos>)."""
    was_training = model.training
    model.eval()
    outs: list[str] = []
    for i in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[i : i + batch_size], padding=True, return_tensors="pt")
        ro = sample_completions(
            model,
            enc["input_ids"],
            enc["attention_mask"],
            1,
            max_new_tokens,
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            temperature=0.0,
        )
        outs.extend(decode_completions(tokenizer, ro.completion_ids, ro.completion_mask))
    model.train(was_training)
    return outs


def decode_completions(tokenizer, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> list[str]:
    """Decode keeping <eos> (so a verifier can tell a finished answer from a truncated one), dropping padding."""
    ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id).tolist()
    pad = tokenizer.pad_token_id
    return tokenizer.batch_decode([[t for t in row if t != pad] for row in ids], skip_special_tokens=False)


class GroupScorer(nn.Module):
    """The policy's training forward as ONE module call, so that DDP sees one forward per backward.

    (P, Tp) prompts + (P*G, Tc) completions -> (P*G, Tc, V) logits, each prompt run once for its group.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, prompt_ids, prompt_mask, completion_ids, num_generations: int) -> torch.Tensor:
        return completion_logits(self.model, prompt_ids, prompt_mask, completion_ids, num_generations)
