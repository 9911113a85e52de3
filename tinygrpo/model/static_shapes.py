"""Static shapes: every batch a model sees padded to one of a few buckets, so that a GPU can replay a captured forward
rather than launch each of its hundreds of small kernels from Python (PyTorch's "Accelerating PyTorch with CUDA
Graphs"; gpt-fast and transformers' StaticCache pad the same way). Decoding tiny models is launch-bound there.

- `bucket_size`: the least 8 x 2^k that holds n: at most twice n, and few shapes (10 up to 4096).
- `pad_to_buckets`: prompts to bucket(P) rows and bucket(Tp) columns (the decode's and the scoring's padding).
- `StaticShapeBackend`: another backend's scoring forward over the batch padded to buckets (rows, prompt width and
  completion width, the last capped at the longest completion), every completion position computed (no shape depends on where a row ends), the real rows and
  positions sliced back out. The decode's static loop is tinygrpo/rollout/static_decode.py.

What a pad costs in exactness: nothing. A padded prompt column is masked (its attention weight is exactly zero and
positions count real tokens only), an extra prompt row is a copy of the first prompt, an extra completion column
comes after every real one (causality keeps it from the real positions), and none of them is returned. The logits
can differ from the unpadded forward's in their last bits (a longer softmax sum, other kernel shapes); the tests
compare in float64 (tests/test_static_scoring.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from .backend import Backend, Decoder

SMALLEST_BUCKET = 8


def bucket_size(n: int, smallest: int = SMALLEST_BUCKET) -> int:
    """The bucket of a size n >= 1: the least smallest x 2^k that holds it (8, 16, 32, ...): at most twice n, and
    log2(n / smallest) + 1 shapes up to n."""
    if n < 1:
        raise ValueError(f"a bucket holds at least one row or token, got {n}")
    size = smallest
    while size < n:
        size *= 2
    return size


def pad_to_buckets(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, Tp) left-padded prompts -> (bucket(P), bucket(Tp)): more left padding, then copies of the first prompt
    as the extra rows (real tokens, so every row's attention has a key; their completions are dropped)."""
    P, Tp = prompt_ids.shape
    rows, width = bucket_size(P), bucket_size(Tp)
    ids = torch.full((rows, width), pad_token_id, dtype=prompt_ids.dtype, device=prompt_ids.device)
    mask = torch.zeros((rows, width), dtype=prompt_mask.dtype, device=prompt_mask.device)
    ids[:P, width - Tp :], mask[:P, width - Tp :] = prompt_ids, prompt_mask
    ids[P:, width - Tp :], mask[P:, width - Tp :] = prompt_ids[:1], prompt_mask[:1]
    return ids, mask


def static_shapes_on(option: bool | None, device: torch.device) -> bool:
    """The `static_shapes` option as it applies on `device`: None is on for CUDA (launch-bound: the static form is
    the one a graph can replay), off on the CPU (where the dynamic loop, which drops finished rows, is faster:
    benchmarks/static_decode.py)."""
    return option if option is not None else device.type == "cuda"


@dataclass(frozen=True)
class StaticLayout:
    """The inner backend's layout of the padded batch, and the real batch's size within it."""

    inner: Any
    rows: int  # P * G: the real completions (the first rows of the padded batch)
    width: int  # Tc: the real completion width (the first columns)


class StaticShapeBackend:
    """Another backend's forwards on batches padded to buckets (see the module docstring): the scoring forward sees
    (bucket(P) * G, bucket(Tc)) completions after (bucket(P), bucket(Tp)) prompts, whatever the batch; `logits`
    returns the real (P * G, Tc) part. Decoding is the inner backend's (sample_completions(static=True) pads the
    prompts itself). Gradients flow through the slice to the real positions only."""

    def __init__(self, inner: Backend, max_width: int | None = None) -> None:
        """`max_width`: the widest completion there can be (max_completion_length): the width's bucket is capped
        there, so that a padded position never passes the positions the decode itself reaches (a model's
        n_positions)."""
        self.inner, self.max_width = inner, max_width
        self.name = f"{inner.name}+static"
        self.mode_independent = inner.mode_independent

    def decoder(
        self, model: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, G: int
    ) -> Decoder:
        return self.inner.decoder(model, prompt_ids, prompt_mask, G)

    def static_decoder(self, model, prompt_ids, prompt_mask, G, T, capture=None):
        """The inner backend's decoder of fixed buffers, where it has one (else None: its own decoder serves)."""
        inner = getattr(self.inner, "static_decoder", None)
        return None if inner is None else inner(model, prompt_ids, prompt_mask, G, T, capture)

    def layout(
        self,
        model: nn.Module,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        G: int,
        completion_mask: torch.Tensor | None = None,
    ) -> StaticLayout:
        # (completion_mask is not passed on: a forward that skips what follows a row's end has a shape that depends
        # on where rows end; masked positions are out of every loss anyway)
        P = prompt_ids.size(0)
        B, Tc = completion_ids.shape
        if B != P * G:
            raise ValueError(f"{B} completion rows for {P} prompts x {G} samples")
        ids, mask = pad_to_buckets(prompt_ids, prompt_mask, 0)  # (a masked pad: any id in the vocabulary)
        width = bucket_size(max(Tc, 1))
        if self.max_width is not None:
            width = max(Tc, min(width, self.max_width))
        padded = completion_ids.new_zeros((ids.size(0) * G, width))
        padded[:B, :Tc] = completion_ids
        return StaticLayout(self.inner.layout(model, ids, mask, padded, G), B, Tc)

    def logits(self, model: nn.Module, layout: StaticLayout) -> torch.Tensor:
        return self.inner.logits(model, layout.inner)[: layout.rows, : layout.width]
