"""Batched sampling and completion log-probs for a causal LM, sharing each prompt's keys/values across its group.

GRPO draws G completions of the same prompt. The prompt's keys and values are identical for all G of them, so they
are computed once for the P prompts and serve the G samples: exact, and ~2.6x less compute on 2-digit addition
than running P * G copies of the prompt. The same holds for the training and reference forwards
(`completion_logits`), where autograd flows through the sharing.

Two implementations of the same math:
- the model's grouped fast path, when it has one (`tiny_lm.grouped`: `model.grouped_logits`,
  `model.grouped_decoder`): plain functions on the weights, one flat token matrix, and no work on tokens after EOS;
- the generic path for any transformers causal LM whose forward accepts `cache`, `attention_mask` and
  `logits_to_keep` (`CacheDecoder`, a `DynamicCache` repeated with `batch_repeat_interleave`).
Both decode with the same loop (`sample_completions`), which drops finished rows, so a seeded generator draws the
same completions on either path; tests/test_grouped.py checks logits, gradients and samples against each other.
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
    if logits.dtype != torch.float32:
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
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
    weights = torch.exp(logits - logits.amax(-1, keepdim=True))  # (B, V), unnormalised
    cdf = weights.cumsum(-1)
    u = torch.rand(logits.size(0), 1, generator=generator, device=logits.device) * cdf[:, -1:]
    return (cdf <= u).sum(-1).clamp(max=logits.size(-1) - 1)  # first index whose cdf exceeds u


class CacheDecoder:
    """Incremental decoding with any transformers causal LM: a `DynamicCache` holding each prompt's keys/values
    once, repeated for its G samples. Same interface as `tiny_lm.grouped.GroupedDecoder` (the fast path):
    `logits` (A, V) for the A live rows, `keep(rows)` drops the others, `step(tokens)` feeds one token per row."""

    @torch.inference_mode()
    def __init__(self, model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, num_generations: int) -> None:
        G = num_generations
        self.model, self.cache = model, DynamicCache()
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, cache=self.cache, use_cache=True,
                    logits_to_keep=1)  # fmt: skip
        self.logits = out.logits[:, -1].repeat_interleave(G, dim=0)  # (P*G, V)
        if G > 1:
            self.cache.batch_repeat_interleave(G)
        self.mask = prompt_mask.repeat_interleave(G, dim=0)  # (P*G, Tp)

    @torch.inference_mode()
    def keep(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask, self.logits = self.mask[rows], self.logits[rows]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.mask, cache=self.cache, use_cache=True)
        self.logits = out.logits[:, -1]
        return self.logits


def uses_grouped_path(model: torch.nn.Module, grouped: bool) -> bool:
    """Use the model's grouped fast path (tiny_lm has one) if asked for and the model can compute it exactly now."""
    return grouped and bool(getattr(model, "supports_grouped", False))


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
    grouped: bool = True,
) -> Rollout:
    """prompt_ids/prompt_mask (P, Tp), left-padded -> G completions per prompt, rows grouped by prompt (P*G, Tc).

    One batched decode for all P*G sequences with a KV cache. A row that emits EOS is done: later tokens are pad
    (masked), and it leaves the batch, so each step computes only the rows still running; decoding ends when
    none is left or at max_new_tokens. `grouped=False` forces the generic transformers forward.
    """
    if uses_grouped_path(model, grouped):
        dec = model.grouped_decoder(prompt_ids, prompt_mask, num_generations)
    else:
        dec = CacheDecoder(model, prompt_ids, prompt_mask, num_generations)
    logits = dec.logits  # (B, V)
    B = logits.size(0)
    completion_ids = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=logits.device)
    live = torch.arange(B, device=logits.device)  # rows still running, in the order the decoder holds them
    Tc = max_new_tokens
    for step in range(max_new_tokens):
        nxt = sample_from_logits(logits, temperature, top_k, top_p, generator)  # (A,)
        completion_ids[live, step] = nxt
        if step == max_new_tokens - 1:
            break
        running = nxt != eos_token_id
        if not bool(running.all()):
            keep = running.nonzero().squeeze(1)
            if keep.numel() == 0:
                Tc = step + 1
                break
            live, nxt = live[keep], nxt[keep]
            dec.keep(keep)
        logits = dec.step(nxt)
    completion_ids = completion_ids[:, :Tc]  # (B, Tc): as long as the longest completion
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
    completion_mask: torch.Tensor | None = None,
    grouped: bool = True,
) -> torch.Tensor:
    """Logits that score each completion token: (P, Tp) prompts, (P*G, Tc) completions -> (P*G, Tc, V).

    Position t of the result is the distribution the model gave completion token t. The prompt is run once per
    prompt and its keys/values serve the G completions (exact; gradients flow through the sharing).
    With the model's grouped fast path and a `completion_mask`, only the positions the mask marks are computed
    (the rest are 0: they are masked out of every loss). The generic path feeds every token, including those
    after EOS; causality keeps them from touching earlier positions.
    """
    G = num_generations
    if uses_grouped_path(model, grouped):
        return model.grouped_logits(prompt_ids, prompt_mask, completion_ids, G, completion_mask)
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


def decode_completions(
    tokenizer, completion_ids: torch.Tensor, completion_mask: torch.Tensor, cache: dict | None = None
) -> list[str]:
    """Decode keeping <eos> (so a verifier can tell a finished answer from a truncated one), dropping padding.

    `cache` (a dict the caller keeps) maps token tuples to text: GRPO samples the same short completions over and
    over, and the tokenizer is only asked for new ones. Exact: equal ids decode to equal text.
    """
    ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id).tolist()
    return decode_rows(tokenizer, ids, cache)


def decode_rows(tokenizer, ids: list[list[int]], cache: dict | None = None) -> list[str]:
    """`decode_completions` on token-id lists: <eos> kept, padding ids dropped, `cache` as there."""
    pad = tokenizer.pad_token_id
    rows = [tuple(t for t in row if t != pad) for row in ids]
    if cache is None:
        return tokenizer.batch_decode([list(r) for r in rows], skip_special_tokens=False)
    if len(cache) > 1 << 16:  # bounded: start over rather than grow without limit
        cache.clear()
    new = list({r for r in rows if r not in cache})
    if new:
        cache.update(zip(new, tokenizer.batch_decode([list(r) for r in new], skip_special_tokens=False), strict=True))
    return [cache[r] for r in rows]


class GroupScorer(nn.Module):
    """The policy's training forward as ONE module call, so that DDP sees one forward per backward.

    (P, Tp) prompts + (P*G, Tc) completions -> (P*G, Tc, V) logits, each prompt run once for its group.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, prompt_ids, prompt_mask, completion_ids, num_generations: int,
                completion_mask: torch.Tensor | None = None, grouped: bool = True) -> torch.Tensor:  # fmt: skip
        return completion_logits(self.model, prompt_ids, prompt_mask, completion_ids, num_generations,
                                 completion_mask, grouped)  # fmt: skip
