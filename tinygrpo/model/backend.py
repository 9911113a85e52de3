"""How a model is run for GRPO's shapes: one backend, chosen once per trainer, for decoding and for scoring.

GRPO draws G completions of each prompt, then scores them (the reference's and the policy's log-probs). The prompt's
keys and values are the same for its G completions, so both backends compute them once per prompt and share them:
exact, and ~2.6x less compute on 2-digit addition than running P * G copies of the prompt.

- `GroupedBackend`: the model's own grouped fast path (tiny_lm has one: `grouped_layout`, `grouped_logits`,
  `grouped_decoder`): plain functions on the weights, one flat token matrix, nothing computed after EOS. Its frames
  (index tensors that depend only on the prompts' padding and the shape) are kept in the backend's `FrameCache`, so
  a trainer builds them once for equal-length prompts, not three times a step.
- `GenericBackend`: any transformers causal LM whose forward accepts `cache`/`past_key_values`, `attention_mask`
  and `logits_to_keep`: a `DynamicCache` that holds each prompt once, repeated for its G samples. Positions count
  from each prompt's first real token, as `generate()` counts them (a model's forward alone counts the left padding).

A backend turns a batch into a layout once (`layout`), then scores that layout with any model of the family
(`logits`): the reference and the policy score the same layout. tests/test_grouped.py checks that both backends give
the same logits, gradients and samples.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn as nn
from transformers.cache_utils import DynamicCache

from tiny_lm.compat import cache_kwargs, checkpoints_activations


class Decoder(Protocol):
    """Incremental decoding of G samples per prompt (rows grouped by prompt)."""

    logits: torch.Tensor  # (A, V): the next-token logits of the A live rows

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (indices into the live rows), in that order."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per live row; returns (and stores in `logits`) the next (A, V) logits."""


class Backend(Protocol):
    name: str
    mode_independent: bool  # computes the same in train and eval mode (so sampling needs no mode switch)

    def decoder(
        self, model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, G: int
    ) -> Decoder: ...

    def layout(
        self,
        model: nn.Module,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        G: int,
        completion_mask: torch.Tensor | None = None,
    ) -> Any: ...

    def logits(self, model: nn.Module, layout: Any) -> torch.Tensor: ...


class GroupedBackend:
    """The model's grouped fast path (see tiny_lm/grouped.py). Only positions that are scored are computed: with a
    `completion_mask`, the logits after a row's last marked token are 0 (masked out of every loss anyway).

    Each model's weights are looked up once, on first use, and kept: training updates parameters in place (the
    optimizer holds the very same tensors), so the lookup stays valid for as long as the optimizer's does.
    """

    name = "grouped"
    mode_independent = True  # chosen only for models without dropout (`supports_grouped`)

    def __init__(self, max_group_sequence: int | None = None) -> None:
        """`max_group_sequence`: the longest group sequence the layouts attend as one (tiny_lm/grouped_layout.py; 0
        = always per sample); None leaves it to the model's `grouped_layout` (tiny_lm: MAX_GROUP_SEQUENCE)."""
        from tiny_lm.grouped_layout import FrameCache

        self.frames = FrameCache()
        # Passed only when chosen, so that a model's grouped_layout need not take the keyword.
        self._layout_options = (
            {} if max_group_sequence is None else {"max_group_sequence": max_group_sequence}
        )
        # id -> (the model, held so that the id stays its own, its weights)
        self._weights: dict[int, tuple[nn.Module, Any]] = {}
        self._static: dict[tuple, Any] = {}  # (model id, shape, graphed) -> its StaticGroupedDecoder

    def weights(self, model: nn.Module) -> Any:
        entry = self._weights.get(id(model))
        if entry is None or entry[0] is not model:
            entry = self._weights[id(model)] = (model, model.grouped_weights())
        return entry[1]

    def decoder(self, model, prompt_ids, prompt_mask, G):
        return model.grouped_decoder(prompt_ids, prompt_mask, G, self.frames, self.weights(model))

    def static_decoder(self, model, prompt_ids, prompt_mask, G, T, capture=None):
        """A `StaticGroupedDecoder` (tiny_lm/static_decoder.py) for these prompts and at most T steps, prefilled:
        one per shape and model, kept (its buffers, and its captured graphs with `capture`, serve every rollout of
        that shape). None where a position could pass the model's context (GroupedDecoder then says where)."""
        from tiny_lm.static_decoder import StaticGroupedDecoder

        w = self.weights(model)
        P, Tp = prompt_ids.shape
        if Tp + T > w.n_positions:  # (a prompt's positions count its real tokens: at most Tp of them)
            return None
        key = (id(model), P, Tp, G, T, capture is not None)
        dec = self._static.get(key)
        if dec is None or dec.w is not w:  # (w: this model's weights, not those of an earlier one of its id)
            if dec is not None:
                dec.release()
            if len(self._static) >= 16:  # (bounded: a few buckets a run)
                for old in self._static.values():
                    old.release()
                self._static.clear()
            dec = self._static[key] = StaticGroupedDecoder(w, P, Tp, G, T, capture)
        dec.prefill(prompt_ids, prompt_mask, self.frames)
        return dec

    def layout(self, model, prompt_ids, prompt_mask, completion_ids, G, completion_mask=None):
        return model.grouped_layout(
            prompt_ids, prompt_mask, completion_ids, G, completion_mask, self.frames, **self._layout_options
        )

    def logits(self, model, layout):
        return model.grouped_logits(layout, self.weights(model))


@functools.cache
def _takes_position_ids(cls: type) -> bool:
    return "position_ids" in inspect.signature(cls.forward).parameters


def position_kwargs(model: nn.Module, position_ids: torch.Tensor) -> dict:
    """`{"position_ids": ...}` for a forward that takes them, else {}. Left padding shifts a prompt's columns; without
    position ids a transformers model such as GPT-2 numbers the pads too, so a prompt's logits would change with
    the padding the batch gave it. `generate()` passes them the same way. (DDP wraps the model as .module.)"""
    return (
        {"position_ids": position_ids} if _takes_position_ids(type(getattr(model, "module", model))) else {}
    )


def mask_positions(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) left-padded 0/1 mask -> (B, T) positions: a sequence's first real token is 0 (pads: 0 too)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


@dataclass(frozen=True)
class GenericLayout:
    """The generic backend's "layout" is the batch itself: every token is fed."""

    prompt_ids: torch.Tensor  # (P, Tp) left-padded
    prompt_mask: torch.Tensor  # (P, Tp)
    completion_ids: torch.Tensor  # (P*G, Tc)
    G: int


class GenericBackend:
    """Any transformers causal LM, through its own forward with a `DynamicCache`: the prompts run once, their
    cache is repeated for the G samples, then all completion tokens run in one pass (tokens after EOS included;
    causality keeps them from touching the positions that are scored)."""

    name = "generic"
    mode_independent = False  # dropout layers: sampling switches the model to eval mode

    def decoder(self, model, prompt_ids, prompt_mask, G):
        return CacheDecoder(model, prompt_ids, prompt_mask, G)

    def layout(self, model, prompt_ids, prompt_mask, completion_ids, G, completion_mask=None):
        return GenericLayout(prompt_ids, prompt_mask, completion_ids, G)

    def logits(self, model, layout: GenericLayout) -> torch.Tensor:
        G, completion_ids, prompt_mask = layout.G, layout.completion_ids, layout.prompt_mask
        # Activation checkpointing replays each layer in backward, and a replayed layer would write its keys and
        # values into the cache a second time: run every row's prompt and completion without a cache. (DDP wraps
        # the model as .module.)
        if torch.is_grad_enabled() and checkpoints_activations(getattr(model, "module", model)):
            rows = torch.cat([layout.prompt_ids.repeat_interleave(G, 0), completion_ids[:, :-1]], dim=1)
            ones = torch.ones_like(completion_ids[:, :-1])
            mask = torch.cat([prompt_mask.repeat_interleave(G, 0), ones], 1)
            pos = position_kwargs(model, mask_positions(mask))
            logits = model(input_ids=rows, attention_mask=mask, use_cache=False, **pos).logits
            return logits[:, prompt_mask.size(1) - 1 :]
        cache = DynamicCache()
        out = model(
            input_ids=layout.prompt_ids,
            attention_mask=prompt_mask,
            **cache_kwargs(cache),
            **position_kwargs(model, mask_positions(prompt_mask)),
            use_cache=True,
            logits_to_keep=1,
        )
        first = out.logits.repeat_interleave(G, dim=0)  # (P*G, 1, V): predicts completion token 0
        Tc = completion_ids.size(1)
        if Tc == 1:
            return first
        if G > 1:
            cache.batch_repeat_interleave(G)
        mask = prompt_mask.repeat_interleave(G, dim=0)  # (P*G, Tp)
        mask = torch.cat([mask, torch.ones_like(completion_ids[:, : Tc - 1])], dim=1)  # (P*G, Tp + Tc - 1)
        pos = position_kwargs(model, mask_positions(mask)[:, -(Tc - 1) :])
        rest = model(
            input_ids=completion_ids[:, :-1],
            attention_mask=mask,
            **cache_kwargs(cache),
            **pos,
            use_cache=True,
        ).logits
        return torch.cat([first, rest], dim=1)  # (P*G, Tc, V)


class CacheDecoder:
    """Incremental decoding with any transformers causal LM: a `DynamicCache` holding each prompt's keys/values
    once, repeated for its G samples (see `Decoder`)."""

    @torch.inference_mode()
    def __init__(
        self, model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, num_generations: int
    ) -> None:
        G = num_generations
        self.model, self.cache = model, DynamicCache()
        positions = mask_positions(prompt_mask)
        out = model(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            **cache_kwargs(self.cache),
            **position_kwargs(model, positions),
            use_cache=True,
            logits_to_keep=1,
        )
        self.logits = out.logits[:, -1].repeat_interleave(G, dim=0)  # (P*G, V)
        if G > 1:
            self.cache.batch_repeat_interleave(G)
        self.mask = prompt_mask.repeat_interleave(G, dim=0)  # (P*G, Tp)
        # (P*G, 1): each row's next position, one past its prompt's last
        self.next_pos = positions[:, -1:].repeat_interleave(G, dim=0) + 1

    @torch.inference_mode()
    def keep(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.mask, self.logits, self.next_pos = self.mask[rows], self.logits[rows], self.next_pos[rows]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.mask,
            **cache_kwargs(self.cache),
            **position_kwargs(self.model, self.next_pos),
            use_cache=True,
        )
        self.next_pos = self.next_pos + 1
        self.logits = out.logits[:, -1]
        return self.logits


def select_backend(*models: nn.Module | None, prefer_grouped: bool = True) -> Backend:
    """The grouped fast path when asked for and every given model has one that is exact (no dropout); otherwise the
    generic transformers forward. The one place that decides; a trainer calls it once."""
    present = [m for m in models if m is not None]
    if prefer_grouped and present and all(getattr(m, "supports_grouped", False) for m in present):
        return GroupedBackend()
    return GenericBackend()


class PolicyForward(nn.Module):
    """The policy's scoring forward as ONE module call, so that DDP sees one forward per backward: a layout in,
    (P*G, Tc, V) logits out."""

    def __init__(self, model: nn.Module, backend: Backend) -> None:
        super().__init__()
        self.model = model
        self.backend = backend

    def forward(self, layout: Any) -> torch.Tensor:
        return self.backend.logits(self.model, layout)


class AutocastBackend:
    """Another backend's forwards under `torch.autocast` (bf16: TRL's `bf16`): the matmuls run in bfloat16, the
    weights, gradients and optimizer stay float32. Logits come out in bfloat16; `selective_log_softmax` and the
    sampler turn them into float32 before any log-softmax or cumulative sum."""

    def __init__(self, inner: Backend, device_type: str, dtype: torch.dtype = torch.bfloat16) -> None:
        self.inner, self.device_type, self.dtype = inner, device_type, dtype
        self.name = f"{inner.name}+{str(dtype).removeprefix('torch.')}"
        self.mode_independent = inner.mode_independent

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device_type, dtype=self.dtype)

    def decoder(self, model, prompt_ids, prompt_mask, G):
        with self.autocast():
            return _AutocastDecoder(self.inner.decoder(model, prompt_ids, prompt_mask, G), self)

    def layout(self, model, prompt_ids, prompt_mask, completion_ids, G, completion_mask=None):
        return self.inner.layout(model, prompt_ids, prompt_mask, completion_ids, G, completion_mask)

    def logits(self, model, layout):
        with self.autocast():
            return self.inner.logits(model, layout)


class _AutocastDecoder:
    def __init__(self, inner: Decoder, backend: AutocastBackend) -> None:
        self.inner, self.backend = inner, backend

    @property
    def logits(self) -> torch.Tensor:
        return self.inner.logits

    def keep(self, rows: torch.Tensor) -> None:
        self.inner.keep(rows)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        with self.backend.autocast():
            return self.inner.step(tokens)


@contextmanager
def eval_mode(model: torch.nn.Module, backend: Backend) -> Iterator[None]:
    """A backend whose forward depends on the mode (dropout) samples in eval mode, as `generate()` does; the model's
    mode is restored after."""
    switch = model.training and not backend.mode_independent
    if switch:
        model.eval()
    try:
        yield
    finally:
        if switch:
            model.train()
