"""Sampling G completions per prompt: the decode loop, and the sampler it draws each token with.

`sample_completions` is one decoding loop for any backend (tinygrpo/model/backend.py): a row that emits EOS is done
and leaves the batch, so each step computes only the rows still running, and a seeded generator draws the same
completions on either backend. `sample_from_logits` draws one token a row as SamplingParams (tinygrpo/rollout/config.py)
says; `finish_rollout` turns the sampled ids into a Rollout. The static-shape loop (tinygrpo/rollout/static_decode.py)
shares the sampler and the set-up (`decode_setup`), and samples the same completions. tinygrpo/model/text.py turns the
ids back into text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tinygrpo.model.backend import Backend, Decoder, eval_mode, select_backend
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.tool_calls import ToolCalls, ToolUse


@dataclass
class Rollout:
    completion_ids: torch.Tensor  # (P*G, Tc) long, pad after EOS
    completion_mask: (
        torch.Tensor
    )  # (P*G, Tc) 1 for every token up to and including EOS (the environment's too)
    is_eos: torch.Tensor  # (P*G,) bool: the completion ended with EOS (not truncated)
    # (P*G, Tc) bool: the tokens the environment fed (tool replies, tinygrpo/rollout/tool_calls.py); None without tools
    tool_mask: torch.Tensor | None = None
    tool_calls: torch.Tensor | None = None  # (P*G,) calls answered in each completion
    tool_failures: torch.Tensor | None = None  # (P*G,) of them, answered with the environment's error
    environments: list | None = None  # (P*G,) an episode's environment: each row's instance at its end


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """(B, V) logits, (B, V) bool tokens already in each row -> the logits with those tokens' divided by `penalty`
    where positive and multiplied where negative (CTRL's repetition penalty, as transformers applies it)."""
    return torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)


def sample_from_logits(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, V) -> (B,) token ids, one per row, drawn as `params` says (its max_completion_length is the caller's), one
    uniform a row from `generator` (None: torch's global one). `uniforms` (B, 1): the draws to use, already drawn
    (the static-shape decode's); None: drawn here.

    Inverse-CDF sampling (one uniform per row against the cumulative weights) instead of `torch.multinomial`: the
    same distribution, several times cheaper on tiny vocabularies; and exp/sum by hand rather than softmax, which
    is slow on a tiny last dimension on CPU.
    """
    temperature, top_k, top_p = params.temperature, params.top_k, params.top_p
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
    if params.min_p > 0:  # (after top_k/top_p: the top token is kept by both, so the reference is the same)
        top = logits.amax(-1, keepdim=True)
        logits = logits.masked_fill(logits < top + math.log(params.min_p), float("-inf"))
    weights = torch.exp(logits - logits.amax(-1, keepdim=True))  # (B, V), unnormalised
    cdf = weights.cumsum(-1)
    # The uniforms come from the generator's device (the CPU's for the trainer's: the same draws, and checkpoints
    # that resume on either device), then move to the logits'.
    u = uniforms
    if u is None:
        u = torch.rand(
            logits.size(0),
            1,
            generator=generator,
            device=generator.device if generator is not None else logits.device,
        )
    if u.device != logits.device:
        u = u.to(logits.device)
    u = u * cdf[:, -1:]
    return (cdf <= u).sum(-1).clamp(max=logits.size(-1) - 1)  # first index whose cdf exceeds u


def finish_rollout(
    completion_ids: torch.Tensor, eos_token_id: int, tools: ToolCalls | None, tool_mask: torch.Tensor | None
) -> Rollout:
    """(B, Tc) sampled ids, as long as the longest completion -> the Rollout (masks, and the environment's records)."""
    Tc = completion_ids.size(1)
    is_eos_tok = completion_ids == eos_token_id
    # Mask: every token up to and including the first EOS.
    after_eos = (is_eos_tok.cumsum(1) - is_eos_tok.long()) > 0
    completion_mask = (~after_eos).long()
    if tools is None:
        return Rollout(completion_ids, completion_mask, is_eos_tok.any(1))
    return Rollout(
        completion_ids,
        completion_mask,
        is_eos_tok.any(1),
        tool_mask[:, :Tc],
        tools.calls,
        tools.failures,
        tools.environments(),
    )


def decode_setup(
    dec: Decoder,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    params: SamplingParams,
    rows: int,
    tools: ToolUse | None,
) -> tuple[ToolCalls | None, torch.Tensor | None]:
    """What either loop decodes with besides the decoder: the environment's session for `rows` completions, and
    (repetition penalty) each row's tokens so far, its prompt's at first ((rows, V) bool; None: no penalty)."""
    calls = None if tools is None else tools.session(rows)
    seen = None
    if params.repetition_penalty != 1 and params.temperature != 0:
        V, G = dec.logits.size(-1), dec.logits.size(0) // prompt_ids.size(0)
        seen = torch.zeros(prompt_ids.size(0), V, dtype=torch.bool, device=prompt_ids.device)
        seen.scatter_(1, prompt_ids.clamp(0, V - 1), prompt_mask.bool())
        seen = seen.repeat_interleave(G, 0).to(dec.logits.device)
    return calls, seen


@torch.inference_mode()
def sample_completions(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    num_generations: int,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    *,
    eos_token_id: int,
    pad_token_id: int,
    backend: Backend | None = None,
    tools: ToolUse | None = None,
) -> Rollout:
    """prompt_ids/prompt_mask (P, Tp), left-padded -> G completions per prompt, rows grouped by prompt (P*G, Tc).

    One batched decode for all P*G sequences with a KV cache, one uniform a running row a step from `generator`
    (None: torch's global one; the same generator drawn in the same order gives the same completions, so a caller
    that must not move another stream, evaluation beside training, gives its own). A row that emits EOS is done:
    later tokens are pad (masked), and it leaves the batch, so each step computes only the rows still running;
    decoding ends when none is left or at `params.max_completion_length`. `backend` defaults to
    `select_backend(model)`. With `tools` (an environment), a row that ends a tool call is fed the environment's reply
    before it samples again (tinygrpo/rollout/tool_calls.py).
    """
    backend = backend or select_backend(model)
    with eval_mode(model, backend):
        dec = backend.decoder(model, prompt_ids, prompt_mask, num_generations)
        calls, seen = decode_setup(dec, prompt_ids, prompt_mask, params, dec.logits.size(0), tools)
        return decode(
            dec,
            params,
            generator,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            tools=calls,
            seen=seen,
        )


def decode(
    dec: Decoder,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    *,
    eos_token_id: int,
    pad_token_id: int,
    tools: ToolCalls | None = None,
    seen: torch.Tensor | None = None,
) -> Rollout:
    """The decoding loop of `sample_completions` on a decoder that holds the prompts' state. `seen`: (B, V) the
    tokens already in each row, for the repetition penalty (None: off)."""
    logits = dec.logits  # (B, V)
    B, max_new_tokens = logits.size(0), params.max_completion_length
    completion_ids = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=logits.device)
    tool_mask = (
        None if tools is None else torch.zeros(B, max_new_tokens, dtype=torch.bool, device=logits.device)
    )
    live = torch.arange(B, device=logits.device)  # rows still running, in the order the decoder holds them
    Tc = max_new_tokens
    for step in range(max_new_tokens):
        if seen is not None:
            logits = penalize_repeats(logits, seen[live], params.repetition_penalty)
        nxt = sample_from_logits(logits, params, generator)  # (A,)
        if tools is not None:  # a row owed a reply is fed it instead of its sample (which it still drew)
            nxt, fed = tools.next_tokens(live, nxt)
            tool_mask[live[fed], step] = True
        completion_ids[live, step] = nxt
        if seen is not None:
            seen[live, nxt] = True
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
    return finish_rollout(completion_ids[:, :Tc], eos_token_id, tools, tool_mask)


def completion_logits(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    num_generations: int,
    completion_mask: torch.Tensor | None = None,
    backend: Backend | None = None,
) -> torch.Tensor:
    """Logits that score each completion token: (P, Tp) prompts, (P*G, Tc) completions -> (P*G, Tc, V).

    Position t of the result is the distribution the model gave completion token t. The prompt is run once per
    prompt and its keys/values serve the G completions (exact; gradients flow through the sharing). With the grouped
    backend and a `completion_mask`, only the positions the mask marks are computed (the rest are 0). A trainer
    builds the layout once and scores it with several models; this is the one-off form.
    """
    backend = backend or select_backend(model)
    layout = backend.layout(model, prompt_ids, prompt_mask, completion_ids, num_generations, completion_mask)
    return backend.logits(model, layout)
