"""Sampling G completions per prompt.

`sample_completions` is one decoding loop for any backend (tinygrpo/model/backend.py): a row that emits EOS is done
and leaves the batch, so each step computes only the rows still running, and a seeded generator draws the same
completions on either backend. `SamplingParams` is how to sample (length, temperature, top-k, top-p, generator),
one object from the caller down to `sample_from_logits`, the sampler itself. tinygrpo/model/text.py turns the ids
back into text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..model.backend import Backend, Decoder, select_backend
from .tool_calls import ToolCalls, ToolUse


@dataclass(frozen=True)
class SamplingParams:
    """How to sample a completion, token by token.

    - max_new_tokens: tokens per completion at most (EOS included); decoding stops earlier once every row has
      emitted EOS.
    - temperature: the logits are divided by it before the softmax (< 1 sharpens, > 1 flattens); 0 is greedy
      (argmax, no uniform drawn).
    - top_k: sample among the k most likely tokens only (Fan et al. 2018, "Hierarchical Neural Story
      Generation"); 0 = all.
    - top_p: nucleus sampling, among the smallest set of most likely tokens whose probability reaches top_p
      (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"); 1 = all.
    - generator: the source of the uniforms, one per row per step (None: torch's global generator). The same
      generator object, drawn in the same order, gives the same completions; a caller that must not move another
      stream's state (evaluation beside training) gives its own.
    - min_p: sample among the tokens whose probability is at least min_p x the top token's (Nguyen et al. 2024,
      "Turning Up the Heat: Min-p Sampling"); 0 = all.
    - repetition_penalty: a token already in the row (prompt, completion so far, environment replies) has its
      logit divided by it when positive, multiplied when negative, before the temperature (Keskar et al. 2019,
      CTRL; transformers' RepetitionPenaltyLogitsProcessor); 1 = off. Greedy decoding (temperature 0) is argmax.

    Filters and the penalty change what is sampled; the log-probs a loss reads are the model's at the temperature.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    generator: torch.Generator | None = None
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not self.max_new_tokens >= 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not self.top_k >= 0:
            raise ValueError(f"top_k must be >= 0 (0 = all tokens), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @classmethod
    def greedy(cls, max_new_tokens: int) -> SamplingParams:
        """Argmax decoding: draws nothing from any generator."""
        return cls(max_new_tokens, temperature=0)


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
    logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, V) -> (B,) token ids, one per row, drawn as `params` says (its max_new_tokens is the caller's).
    `uniforms` (B, 1): the draws to use, already drawn from `params.generator` (the static-shape decode's);
    None: drawn here.

    Inverse-CDF sampling (one uniform per row against the cumulative weights) instead of `torch.multinomial`: the
    same distribution, several times cheaper on tiny vocabularies; and exp/sum by hand rather than softmax, which
    is slow on a tiny last dimension on CPU.
    """
    temperature, top_k, top_p, generator = params.temperature, params.top_k, params.top_p, params.generator
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
) -> Rollout:
    """prompt_ids/prompt_mask (P, Tp), left-padded -> G completions per prompt, rows grouped by prompt (P*G, Tc).

    One batched decode for all P*G sequences with a KV cache. A row that emits EOS is done: later tokens are pad
    (masked), and it leaves the batch, so each step computes only the rows still running; decoding ends when
    none is left or at `params.max_new_tokens`. `backend` defaults to `select_backend(model)`. A backend whose
    forward depends on the mode (dropout) samples in eval mode, as `generate()` does; the model's mode is restored
    after. With `tools` (an environment), a row that ends a tool call is fed the environment's reply before it
    samples again (tinygrpo/rollout/tool_calls.py). `static`: the same completions from a decode of static shapes
    (tinygrpo/rollout/static_decode.py: no row leaves, no host read per step; the CPU twin of a graphed GPU decode).
    """
    if static:
        from .static_decode import sample_completions_static

        return sample_completions_static(
            model,
            prompt_ids,
            prompt_mask,
            num_generations,
            params,
            eos_token_id,
            pad_token_id,
            backend,
            tools,
        )
    backend = backend or select_backend(model)
    switch = model.training and not backend.mode_independent
    if switch:
        model.eval()
    try:
        dec = backend.decoder(model, prompt_ids, prompt_mask, num_generations)
        calls = None if tools is None else tools.session(prompt_ids.size(0) * num_generations)
        seen = None
        if params.repetition_penalty != 1 and params.temperature != 0:  # the prompt's tokens, each row's
            V = dec.logits.size(-1)
            seen = torch.zeros(prompt_ids.size(0), V, dtype=torch.bool, device=prompt_ids.device)
            seen.scatter_(1, prompt_ids.clamp(0, V - 1), prompt_mask.bool())
            seen = seen.repeat_interleave(num_generations, 0).to(dec.logits.device)
        return decode(
            dec, params, eos_token_id=eos_token_id, pad_token_id=pad_token_id, tools=calls, seen=seen
        )
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
