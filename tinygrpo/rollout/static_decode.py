"""Decoding with static shapes: the same completions as `sampling.decode`, with no row leaving the batch and no host
read per step. On a GPU, decoding tiny models is launch-bound (a step is hundreds of small kernels, each launched
from Python after the host learned which rows still run); a loop whose shapes depend only on the step can be
captured once per bucket and replayed (CUDA graphs: PyTorch's "Accelerating PyTorch with CUDA Graphs"; a static KV
cache, as gpt-fast and transformers' StaticCache). This is that loop, on any device; its tests run on the CPU.

What differs from `decode`, and why no sampled token changes:
- The prompts are padded to buckets (`bucket_size`, tinygrpo/model/static_shapes.py): the batch with prompts whose rows are finished from the start,
  the width with more left padding (masked; positions count real tokens only). Few shapes, whatever the batch.
- A finished row stays in the batch and is fed <pad>; what it computes is never read. A backend with a decoder of
  fixed buffers (the grouped one: tiny_lm/static_decoder.py) decodes with it, so that every step's shapes depend on
  the step alone, and the loop can be captured once as a CUDA graph and replayed (`capture`): every step, sampling
  and bookkeeping included, as one graph (`CapturedLoop`), or, with tools or a repetition penalty, each model step.
- The uniforms. `decode` draws, at each step, one uniform per live row, in row order, from the generator. A CPU
  generator yields one stream (draws of a then b values are the first a + b of one draw), so the whole budget is
  drawn at once, and at each step the live row of rank r among the live rows takes uniform `used + r`; `used`
  grows by the live count, on the device. After decoding the generator is put where `decode` leaves it: its state
  before, advanced by the uniforms used (one host read a rollout, with the width of the longest completion).
- With an environment (tools), the rows that run are read on the host at each step: the environment is host-side.

Floating point: a padded prompt sums its attention over more (masked, exactly zero) terms, and a batch of another
size may take other kernels, so logits can differ in their last bits from `decode`'s; completions are the same
unless a uniform falls within that rounding of a boundary (the tests compare in float64).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tiny_lm.static_decoder import Capture, StaticGroupedDecoder
from tinygrpo.model.backend import Backend, Decoder, eval_mode
from tinygrpo.model.static_shapes import pad_to_buckets
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.sampling import (
    Rollout,
    decode_setup,
    finish_rollout,
    penalize_repeats,
    sample_from_logits,
)
from tinygrpo.rollout.tool_calls import ToolCalls, ToolUse


@torch.inference_mode()
def sample_static(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    num_generations: int,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    *,
    eos_token_id: int,
    pad_token_id: int,
    backend: Backend,
    tools: ToolUse | None = None,
    capture: Capture | None = None,
) -> Rollout:
    """`sample_completions`' completions from a decode of static shapes (see the module docstring: no row leaves, no
    host read per step; the CPU twin of a graphed GPU decode). `capture` (on the model's decoder of fixed buffers):
    the decode loop runs as one captured graph, or, with tools or a repetition penalty, each model step does
    (`CudaGraphs` on a GPU)."""
    rows = prompt_ids.size(0) * num_generations  # (the rows returned; the buckets add more)
    prompt_ids, prompt_mask = pad_to_buckets(prompt_ids, prompt_mask, pad_token_id)
    with eval_mode(model, backend):
        dec = None  # the model's decoder of fixed buffers, where it has one
        if hasattr(backend, "static_decoder"):
            T = params.max_completion_length
            dec = backend.static_decoder(model, prompt_ids, prompt_mask, num_generations, T, capture)
        if dec is None:
            dec = backend.decoder(model, prompt_ids, prompt_mask, num_generations)
        calls, seen = decode_setup(dec, prompt_ids, prompt_mask, params, rows, tools)
        kw = dict(
            eos_token_id=eos_token_id, pad_token_id=pad_token_id, tools=calls, seen=seen, capture=capture
        )
        return decode_static(dec, params, generator, rows, **kw)


def draw_budget(
    gen: torch.Generator | None, n: int, device: torch.device
) -> tuple[torch.Generator, torch.Tensor, torch.Tensor]:
    """A rollout's uniforms, all at once: (the generator, its state before, its next n draws). None: torch's global
    generator, on the CPU only (a GPU decode is given the trainer's CPU generator)."""
    if gen is None:
        if device.type != "cpu":
            raise ValueError("the static-shape decode samples from a generator: give one")
        gen = torch.default_generator
    before = gen.get_state()
    return gen, before, torch.rand(n, generator=gen, device=gen.device)


def rewind(gen: torch.Generator, before: torch.Tensor, used: int) -> None:
    """The generator as `decode` leaves it: its state before the rollout, advanced by the uniforms it used."""
    gen.set_state(before)
    torch.rand(used, generator=gen, device=gen.device)


def sample_live(
    logits: torch.Tensor,
    live: torch.Tensor,
    params: SamplingParams,
    pad_token_id: int,
    stream: torch.Tensor | None,
    used: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One step's tokens (pad for a finished row) and the uniforms used after it: the live row of rank r among the
    live rows takes uniform `used + r` of `stream` (None: greedy, nothing drawn). A finished row's index is clamped
    into the stream and its draw never read."""
    uniforms = None
    if stream is not None:
        rank = live.long().cumsum(0) - 1  # each live row's place among the live rows
        uniforms = stream[(used + rank).clamp(0, stream.numel() - 1)][:, None]  # (B, 1)
        used = used + live.sum()
    return torch.where(live, sample_from_logits(logits, params, uniforms=uniforms), pad_token_id), used


def decode_static(
    dec: Decoder,
    params: SamplingParams,
    generator: torch.Generator | None,
    rows: int,
    *,
    eos_token_id: int,
    pad_token_id: int,
    tools: ToolCalls | None = None,
    seen: torch.Tensor | None = None,
    capture: Capture | None = None,
) -> Rollout:
    """The loop of `sample_static`: every step runs all of the decoder's B rows; the first
    `rows` are the real ones (the rest: a bucket's extra prompts, finished from the start), and are returned. See the
    module docstring for what makes its completions `decode`'s. With `capture` and a decoder of fixed buffers, the
    whole loop (sampling, bookkeeping and the model, every step) is one capture (`CapturedLoop`); with tools or a
    repetition penalty, each model step is (the decoder's own)."""
    if capture is not None and tools is None and seen is None and isinstance(dec, StaticGroupedDecoder):
        key = (params.max_completion_length, params.temperature, params.top_k, params.top_p, params.min_p)
        key += (eos_token_id, pad_token_id)  # (every Python number the graphs hold)
        loop = dec.loops.get(key)
        if loop is None:
            loop = dec.loops[key] = CapturedLoop(dec, params, eos_token_id, pad_token_id, capture)
        return loop.run(generator, rows)
    logits = dec.logits  # (B, V)
    B, T, device, R = logits.size(0), params.max_completion_length, logits.device, rows
    live = torch.arange(B, device=device) < R  # the rows that still run
    completion_ids = torch.full((B, T), pad_token_id, dtype=torch.long, device=device)
    tool_mask = None if tools is None else torch.zeros(B, T, dtype=torch.bool, device=device)
    stream = used = None
    if params.temperature != 0 and T > 0:
        gen, before, stream = draw_budget(generator, R * T, device)  # (an upper bound on the draws)
        stream, used = stream.to(device), torch.zeros((), dtype=torch.long, device=device)
    width = torch.zeros((), dtype=torch.long, device=device)  # steps that some row ran: the rollout's width
    for step in range(T):
        width = width + live.any().long()
        if seen is not None:
            logits = penalize_repeats(logits, seen, params.repetition_penalty)
        nxt, used = sample_live(logits, live, params, pad_token_id, stream, used)
        if tools is not None:  # a row owed a reply is fed it (host-side: the environment is)
            rows = live.nonzero().squeeze(1)
            fed_tokens, fed = tools.next_tokens(rows, nxt[rows])
            nxt[rows] = fed_tokens
            tool_mask[rows[fed], step] = True
        completion_ids[:, step] = nxt
        if seen is not None:
            seen |= torch.zeros_like(seen).scatter_(1, nxt[:, None], live[:, None])
        live = live & (nxt != eos_token_id)
        if step < T - 1:
            logits = dec.step(nxt)
    Tc = int(width)  # (the rollout's host reads: its width, and the uniforms it used)
    if stream is not None:
        rewind(gen, before, int(used))
    tm = None if tool_mask is None else tool_mask[:R]
    return finish_rollout(completion_ids[:R, :Tc], eos_token_id, tools, tm)


class CapturedLoop:
    """`decode_static`'s whole loop as one idempotent function of fixed buffers, captured once and replayed (one
    replay a rollout): step t reads slot t of the loop's state (the live rows, the uniforms used, the width so far,
    the logits) and writes slot t + 1 and column t of the completions, so a warm-up run and the captured run leave
    what one run leaves. Step t samples from the prefill's logits (t = 0) or one of two buffers, and the model writes
    the other: the prefill's are never overwritten, so a second run of the whole loop starts where the first did.
    One per decoder and sampling parameters (a graph holds its Python numbers as constants); how many of the rows
    are real is a buffer (the first live rows), and so are the uniforms, drawn on the host each rollout as
    `decode_static` draws them. A live row's uniform index is below the number drawn; a finished row's is clamped
    into the buffer and its draw never read, so the clamp's bound need not be the rollout's."""

    def __init__(
        self,
        dec: StaticGroupedDecoder,
        params: SamplingParams,
        eos_token_id: int,
        pad_token_id: int,
        capture: Capture,
    ) -> None:
        self.dec, self.eos, self.pad, self.capture = dec, eos_token_id, pad_token_id, capture
        self.params = params  # (each rollout draws from its own generator: `run`)
        B, T, device = dec.logits.size(0), params.max_completion_length, dec.logits.device
        self.T, self.draws = T, params.temperature != 0 and T > 0
        with torch.inference_mode():
            self.stream = torch.zeros(max(B * T, 1), device=device)
            self.live = torch.zeros(T + 1, B, dtype=torch.bool, device=device)
            self.used = torch.zeros(T + 1, dtype=torch.long, device=device)
            self.width = torch.zeros(T + 1, dtype=torch.long, device=device)
            self.ids = torch.zeros(B, T, dtype=torch.long, device=device)
            # the prefill's logits, then two that steps alternate between: the prefill's are never overwritten
            self.logits = torch.zeros(3, *dec.logits.shape, dtype=dec.logits.dtype, device=device)
        self.replay: Callable[[], None] | None = None

    def step(self, t: int) -> None:
        """Step t of `decode_static`'s loop (no tools, no penalty), on the buffers."""
        T, live = self.T, self.live[t]
        self.width[t + 1].copy_(self.width[t] + live.any().long())
        logits = self.logits[0 if t == 0 else 1 + t % 2]
        stream = self.stream if self.draws else None
        nxt, used = sample_live(logits, live, self.params, self.pad, stream, self.used[t])
        if self.draws:
            self.used[t + 1].copy_(used)
        self.ids[:, t].copy_(nxt)
        self.live[t + 1].copy_(live & (nxt != self.eos))
        if t < T - 1:
            self.dec.tokens.copy_(nxt)
            self.dec.compute(t, out=self.logits[1 + (t + 1) % 2])

    def steps(self) -> None:
        """The whole loop: idempotent too (it reads slot 0 and rewrites every later one), so it is captured as one
        graph, and a rollout is one replay."""
        for t in range(self.T):
            self.step(t)

    def run(self, gen: torch.Generator | None, rows: int) -> Rollout:
        """One rollout from the decoder's prefill: the completions of its first `rows` rows, and the generator where
        `decode` leaves it."""
        R, T, dec = rows, self.T, self.dec
        if self.draws:
            gen, before, draw = draw_budget(gen, R * T, dec.logits.device)
        with torch.inference_mode():
            if self.draws:
                self.stream[: R * T].copy_(draw)
            self.live[0].copy_(torch.arange(self.live.size(1), device=self.live.device) < R)
            self.used[0].zero_()
            self.width[0].zero_()
            self.logits[0].copy_(dec.logits)  # (the prefill's)
            if T > 0:
                if self.replay is None:
                    self.replay = self.capture(self.steps)
                self.replay()
        Tc = int(self.width[T])  # (the rollout's host reads: its width, and the uniforms it used)
        if self.draws:
            rewind(gen, before, int(self.used[T]))
        return finish_rollout(self.ids[:R, :Tc].clone(), self.eos, None, None)
