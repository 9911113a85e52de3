"""Static shapes: every batch a model sees padded to one of a few buckets, so that a GPU can replay a captured forward
rather than launch each of its hundreds of small kernels from Python (PyTorch's "Accelerating PyTorch with CUDA
Graphs"; gpt-fast and transformers' StaticCache pad the same way). Decoding tiny models is launch-bound there.

- `bucket_size`: the least 8 x 2^k that holds n: at most twice n, and few shapes (10 up to 4096).
- `pad_to_buckets`: prompts to bucket(P) rows and bucket(Tp) columns (the decode's and the scoring's padding).
- `StaticShapeBackend`: another backend's scoring forward over the batch padded to buckets (rows, prompt width and
  completion width, the last capped at the longest completion), every completion position computed (no shape
  depends on where a row ends), the real rows and positions sliced back out. With a `capture` (CUDA graphs), the
  forwards without gradient that a step makes on its batch (the reference's and the old policy's log-probs: called
  `replayed`) are captured once per model and bucket and replayed (`CapturedScoring`). The decode's static loop is
  tinygrpo/rollout/static_decode.py.

What a pad costs in exactness: nothing. A padded prompt column is masked (its attention weight is exactly zero and
positions count real tokens only), an extra prompt row is a copy of the first prompt, an extra completion column
comes after every real one (causality keeps it from the real positions), and none of them is returned. The logits
can differ from the unpadded forward's in their last bits (a longer softmax sum, other kernel shapes); the tests
compare in float64 (tests/test_static_scoring.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

import torch
import torch.nn as nn

from tiny_lm.static_decoder import Capture
from tinygrpo.model.backend import Backend, Decoder, GroupedBackend

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


def static_backend(
    inner: Backend, max_width: int | None, cuda_graphs: bool, one_process: bool
) -> StaticShapeBackend:
    """A run's static-shape backend. With `cuda_graphs`, replayed from CUDA graphs: the decode's loop and the scoring
    forwards without gradient from one CudaGraphs (one memory pool and stream), and, on one process, the policy's
    forward and backward in the update from torch.cuda.make_graphed_callables (under DDP its gradients' all-reduce
    hooks would wait on a backward that a graph replays: not tried, so eager there)."""
    if not cuda_graphs:
        return StaticShapeBackend(inner, max_width)
    from tiny_lm.static_decoder import CudaGraphs

    training = partial(torch.cuda.make_graphed_callables, allow_unused_input=True) if one_process else None
    return StaticShapeBackend(inner, max_width, CudaGraphs(), training)


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

    def __init__(
        self,
        inner: Backend,
        max_width: int | None = None,
        capture: Capture | None = None,
        graph_training: GraphTraining | None = None,
    ) -> None:
        """`max_width`: the widest completion there can be (max_completion_length): the width's bucket is capped
        there, so that a padded position never passes the positions the decode itself reaches (a model's
        n_positions). `capture` (CudaGraphs): the grouped backend's forwards without gradient are replayed from a
        capture per model and bucket; the decode's loop uses the same one (one memory pool, one stream).
        `graph_training` (torch.cuda.make_graphed_callables): the grouped backend's forwards with gradient, and
        their backward, are replayed from one graphed module per model and bucket (`GraphedScoring`)."""
        self.inner, self.max_width, self.capture = inner, max_width, capture
        self.name = f"{inner.name}+static"
        self.mode_independent = inner.mode_independent
        grouped = isinstance(inner, GroupedBackend)
        self.captured = CapturedScoring(inner, capture) if capture is not None and grouped else None
        self.graphed = (
            GraphedScoring(inner, graph_training) if graph_training is not None and grouped else None
        )

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
        if not torch.is_grad_enabled():
            if self.captured is not None and self.captured.on:
                return self.captured.logits(model, layout.inner)[: layout.rows, : layout.width]
        elif self.graphed is not None:
            return self.graphed.logits(model, layout.inner)[: layout.rows, : layout.width]
        return self.inner.logits(model, layout.inner)[: layout.rows, : layout.width]


@dataclass
class _Captured:
    model: nn.Module  # (held, so that the id in the key stays this model's)
    names: list[str]  # the layout's tensor fields
    layout: Any  # the layout with every tensor a buffer, refilled each call
    out: torch.Tensor  # the logits buffer the replay writes
    replay: Callable[[], None]


@dataclass
class _Graphed:
    model: nn.Module  # (as _Captured's)
    names: list[str]  # the layout's tensor fields, in the order the graphed module takes them
    call: Callable[..., torch.Tensor]


class _PerShape:
    """Entries per model and layout shape (`_shape_of`), bounded: past `maxsize`, the oldest is dropped (and the
    cycle collector run: a graph may refer back to itself, and its memory pool goes with it)."""

    def __init__(self, maxsize: int = 16) -> None:
        self.maxsize = maxsize
        self.entries: dict[tuple, Any] = {}

    def get(self, model: nn.Module, layout: Any, make: Callable[[], Any]) -> Any:
        """The entry of (model, layout's shape), made by `make` if there is none of this model (an entry's `model`
        is held, so that an id reused by another model is not mistaken for it)."""
        key = (id(model), *_shape_of(layout))
        entry = self.entries.get(key)
        if entry is None or entry.model is not model:
            if key not in self.entries and len(self.entries) >= self.maxsize:
                del self.entries[next(iter(self.entries))]
                gc.collect()
            entry = self.entries[key] = make()
        return entry


@contextmanager
def replayed(backend: Any) -> Iterator[None]:
    """Within: a StaticShapeBackend with a capture replays its forwards without gradient (a step's reference and old
    log-probs: every step, on a few shapes). Elsewhere (an evaluation's or a log's forwards: other shapes, now and
    then) they run eagerly, so that no graph holds their memory for the rest of the run. Any other backend: as
    without."""
    captured = getattr(backend, "captured", None)
    if captured is None:
        yield
        return
    before, captured.on = captured.on, True
    try:
        yield
    finally:
        captured.on = before


class CapturedScoring:
    """A backend's scoring forward, without gradient, captured once per model and layout shape and replayed: the
    reference's and the old policy's log-probs, two forwards a step of hundreds of small kernels each on a GPU
    (within `replayed`).

    A layout of one bucket has the same shapes and Python values whatever the batch (StaticShapeBackend pads it and
    computes every position); only its tensors' values differ. So each call copies the layout's tensors into
    buffers the graph reads, replays, and returns a copy of the logits buffer (the next replay overwrites it). The
    weights are read where they live: an optimizer step or a reference update, made in place, is read by the next
    replay. Bounded: past `maxsize` shapes and models, the oldest capture is dropped.
    """

    def __init__(self, inner: Backend, capture: Capture, maxsize: int = 16) -> None:
        self.inner, self.capture = inner, capture
        self.graphs = _PerShape(maxsize)
        self.on = False  # (set within `replayed`)

    def logits(self, model: nn.Module, layout: Any) -> torch.Tensor:
        entry = self.graphs.get(model, layout, lambda: self._capture(model, layout))
        for name in entry.names:  # (just captured: the same values, copied onto themselves)
            getattr(entry.layout, name).copy_(getattr(layout, name))
        entry.replay()
        return entry.out.clone()

    def _capture(self, model: nn.Module, layout: Any) -> _Captured:
        names = _tensor_names(layout)
        # plain buffers (refilled under no_grad and inference_mode alike), and an eager run for the output's shape
        with torch.inference_mode(False), torch.no_grad():
            fixed = replace(layout, **{n: getattr(layout, n).clone() for n in names})
            out = torch.empty_like(self.inner.logits(model, fixed))
        inner = self.inner

        def forward() -> None:
            out.copy_(inner.logits(model, fixed))

        return _Captured(model, names, fixed, out, self.capture(forward))


# make_graphed_callables(module, sample_args) -> a module of the same call whose forward and backward replay CUDA
# graphs (torch.cuda.make_graphed_callables; the tests' CPU stand-in traces both instead)
GraphTraining = Callable[[nn.Module, tuple[torch.Tensor, ...]], Callable[..., torch.Tensor]]


class _TensorsToLogits(nn.Module):
    """The inner backend's scoring forward as a module of tensors alone (what make_graphed_callables takes): the
    layout's tensor fields in, the logits out; the layout's other fields, fixed, from `template`. Its parameters are
    the model's, so that the graphed backward gives theirs."""

    def __init__(self, model: nn.Module, inner: Backend, template: Any, names: list[str]) -> None:
        super().__init__()
        self.model, self.inner, self.template, self.names = model, inner, template, names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.inner.logits(
            self.model, replace(self.template, **dict(zip(self.names, tensors, strict=True)))
        )


class GraphedScoring:
    """A backend's scoring forward with gradient (the policy's, in the update) and its backward, replayed from graphs
    made once per model and layout shape by `graph` (torch.cuda.make_graphed_callables: its own static inputs,
    which each call fills, and its own backward graph; the parameters are read in place, and their gradients
    reach `.grad` through autograd as the eager backward's do). PyTorch's "Accelerating PyTorch with CUDA Graphs",
    partial-network capture. Bounded as CapturedScoring (`_PerShape`).

    Two things a caller must hold to (the update does: tinygrpo/update/policy_update.py): the logits returned are
    the graph's output buffer, so each is done with (its loss backpropagated) before the next forward of its shape;
    and each backward starts from `.grad` None (zero_grad sets it so), because the graphed backward hands `.grad`
    its own gradient buffer, which a second backward onto it would add to itself and the next replay overwrite."""

    def __init__(self, inner: Backend, graph: GraphTraining, maxsize: int = 16) -> None:
        self.inner, self.graph = inner, graph
        self.graphs = _PerShape(maxsize)

    def logits(self, model: nn.Module, layout: Any) -> torch.Tensor:
        entry = self.graphs.get(model, layout, lambda: self._graph(model, layout))
        return entry.call(*(getattr(layout, n) for n in entry.names))

    def _graph(self, model: nn.Module, layout: Any) -> _Graphed:
        names = _tensor_names(layout)
        template = replace(layout, **dict.fromkeys(names))  # (its other fields; no tensor of this batch held)
        module = _TensorsToLogits(model, self.inner, template, names)
        sample = tuple(getattr(layout, n).clone() for n in names)  # (its static inputs)
        return _Graphed(model, names, self.graph(module, sample))


def _tensor_names(layout: Any) -> list[str]:
    return [f.name for f in fields(layout) if isinstance(getattr(layout, f.name), torch.Tensor)]


def _shape_of(layout: Any) -> tuple:
    """What a captured forward of `layout` fixes: every tensor's shape, dtype and device, every other field's value."""
    return tuple(
        (v.shape, v.dtype, v.device) if isinstance(v, torch.Tensor) else v
        for v in (getattr(layout, f.name) for f in fields(layout))
    )
