"""Sampling G completions per prompt.

`sample_completions` is one decoding loop for any backend (tinygrpo/model/backend.py): a row that emits EOS is done
and leaves the batch, so each step computes only the rows still running, and a seeded generator draws the same
completions on either backend; `static=True` runs the static-shape loop (static_decode.py), the same completions.
`SamplingParams` is how to sample, one object from the caller down to `sample_from_logits`, the sampler itself
(both in sampler.py). tinygrpo/model/text.py turns the ids back into text.
"""

from __future__ import annotations

import torch

from tiny_lm.static_decoder import Capture
from tinygrpo.model.backend import Backend, Decoder, select_backend
from tinygrpo.model.static_shapes import pad_to_buckets
from tinygrpo.rollout.sampler import (
    Rollout,
    SamplingParams,
    finish_rollout,
    penalize_repeats,
    sample_from_logits,
)
from tinygrpo.rollout.static_decode import decode_static
from tinygrpo.rollout.tool_calls import ToolCalls, ToolUse

__all__ = [
    "Rollout",
    "SamplingParams",
    "completion_logits",
    "decode",
    "finish_rollout",
    "penalize_repeats",
    "sample_completions",
    "sample_from_logits",
]


@torch.inference_mode()
def sample_completions(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    num_generations: int,
    params: SamplingParams,
    *,
    eos_token_id: int,
    pad_token_id: int,
    backend: Backend | None = None,
    tools: ToolUse | None = None,
    static: bool = False,
    capture: Capture | None = None,
) -> Rollout:
    """prompt_ids/prompt_mask (P, Tp), left-padded -> G completions per prompt, rows grouped by prompt (P*G, Tc).

    One batched decode for all P*G sequences with a KV cache. A row that emits EOS is done: later tokens are pad
    (masked), and it leaves the batch, so each step computes only the rows still running; decoding ends when
    none is left or at `params.max_new_tokens`. `backend` defaults to `select_backend(model)`. A backend whose
    forward depends on the mode (dropout) samples in eval mode, as `generate()` does; the model's mode is restored
    after. With `tools` (an environment), a row that ends a tool call is fed the environment's reply before it
    samples again (tinygrpo/rollout/tool_calls.py). `static`: the same completions from a decode of static shapes
    (tinygrpo/rollout/static_decode.py: no row leaves, no host read per step; the CPU twin of a graphed GPU decode).
    `capture` (with `static`, on the model's fixed-buffer decoder): the decode loop runs as one captured graph, or,
    with tools or a repetition penalty, each model step does (static_decode.py; `CudaGraphs` on a GPU).
    """
    backend = backend or select_backend(model)
    switch = model.training and not backend.mode_independent
    if switch:
        model.eval()
    try:
        rows = prompt_ids.size(0) * num_generations  # (the rows returned; the static loop's buckets add more)
        if static:
            prompt_ids, prompt_mask = pad_to_buckets(prompt_ids, prompt_mask, pad_token_id)
        dec = None
        # the model's decoder of fixed buffers, where it has one
        if static and hasattr(backend, "static_decoder"):
            dec = backend.static_decoder(
                model, prompt_ids, prompt_mask, num_generations, params.max_new_tokens, capture
            )
        if dec is None:
            dec = backend.decoder(model, prompt_ids, prompt_mask, num_generations)
        calls = None if tools is None else tools.session(rows)
        seen = None
        if params.repetition_penalty != 1 and params.temperature != 0:  # the prompt's tokens, each row's
            V = dec.logits.size(-1)
            seen = torch.zeros(prompt_ids.size(0), V, dtype=torch.bool, device=prompt_ids.device)
            seen.scatter_(1, prompt_ids.clamp(0, V - 1), prompt_mask.bool())
            seen = seen.repeat_interleave(num_generations, 0).to(dec.logits.device)
        kw = dict(eos_token_id=eos_token_id, pad_token_id=pad_token_id, tools=calls, seen=seen)
        if static:
            return decode_static(dec, params, rows, capture=capture, **kw)
        return decode(dec, params, **kw)
    finally:
        if switch:
            model.train()


def decode(
    dec: Decoder,
    params: SamplingParams,
    *,
    eos_token_id: int,
    pad_token_id: int,
    tools: ToolCalls | None = None,
    seen: torch.Tensor | None = None,
) -> Rollout:
    """The decoding loop of `sample_completions` on a decoder that holds the prompts' state. `seen`: (B, V) the
    tokens already in each row, for the repetition penalty (None: off)."""
    logits = dec.logits  # (B, V)
    B, max_new_tokens = logits.size(0), params.max_new_tokens
    completion_ids = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=logits.device)
    tool_mask = (
        None if tools is None else torch.zeros(B, max_new_tokens, dtype=torch.bool, device=logits.device)
    )
    live = torch.arange(B, device=logits.device)  # rows still running, in the order the decoder holds them
    Tc = max_new_tokens
    for step in range(max_new_tokens):
        if seen is not None:
            logits = penalize_repeats(logits, seen[live], params.repetition_penalty)
        nxt = sample_from_logits(logits, params)  # (A,)
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
