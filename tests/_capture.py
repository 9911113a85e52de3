"""A CPU stand-in for `CudaGraphs` (tiny_lm/static_decoder.py) that is as strict as a CUDA graph where a CPU can be.

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
