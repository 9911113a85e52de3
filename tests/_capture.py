"""CPU stand-ins for CUDA graphs, as strict as a graph where a CPU can be: `TracedCapture` for `CudaGraphs`
(tiny_lm/static_decoder.py), `TracedTraining` for `torch.cuda.make_graphed_callables`.

`TracedCapture` runs fn once (the warm-up, as `CudaGraphs` does), then traces it with `make_fx` into a graph of
ATen calls and replays that graph. Like a captured CUDA graph, the replay:
- reads and writes the very tensors fn used (each is a constant of the graph, the same object: a buffer filled
  between replays is read, a tensor made afresh each call and not copied into a buffer is not);
- keeps every Python value as it was at capture (a step index, a shape, a branch on a Python flag);
- cannot read a tensor's value on the host: the trace refuses `.item()`, `int(t)`, `bool(t)` (a CUDA capture
  fails on such a sync too).
What it cannot show: anything only a GPU does (memory pools, streams, a kernel that syncs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx.experimental.proxy_tensor import make_fx


class TracedCapture:
    def __init__(self) -> None:
        self.captured = 0
        self.replayed = 0
        self.names: list[str] = []  # each captured function's qualified name, in order

    def __call__(self, fn: Callable[[], None]) -> Callable[[], None]:
        fn()  # the warm-up
        graph = make_fx(
            lambda: fn()
        )()  # (tracing runs fn's ops once more: fn is idempotent, as capturing needs)
        self.captured += 1
        self.names.append(fn.__qualname__)

        def replay() -> None:
            self.replayed += 1
            graph()

        return replay


class TracedTraining:
    """A CPU stand-in for `torch.cuda.make_graphed_callables(module, sample_args)`: traces the module's forward and
    its backward (the gradients of its parameters) with `make_fx` on the sample inputs, which fails on a host read
    or on Python that branches on a tensor's values, as a capture would; then returns the module's own call, so its
    calls run eagerly (the graphed forward and backward, and how their gradients reach `.grad`, are torch's own).
    Counts the modules graphed and the calls."""

    def __init__(self) -> None:
        self.graphed = 0
        self.calls = 0

    def __call__(self, module: torch.nn.Module, sample: tuple[torch.Tensor, ...], **options) -> Callable:
        params = tuple(p for p in module.parameters() if p.requires_grad)

        def forward_backward(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with torch.enable_grad():
                out = module(*inputs)
                return (out, *torch.autograd.grad(out, params, torch.ones_like(out)))

        make_fx(forward_backward)(*sample)  # (raises where a capture would fail)
        self.graphed += 1

        def call(*inputs: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return module(*inputs)

        return call
