"""A count of host reads: what benchmarks/static_decode.py reports per decode step and tests/test_static_decode.py
asserts on (a module of its own: the benchmark's docs table imports that script without torch)."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


class HostReads(TorchFunctionMode):
    """Counts what makes the host wait for the device: reading a tensor's values (item, tolist, bool, int, float)
    or a shape that depends on them (nonzero), the calls torch.cuda.set_sync_debug_mode reports on a GPU (also
    tests/test_static_decode.py's counter)."""

    READS = {
        torch.Tensor.item,
        torch.Tensor.tolist,
        torch.Tensor.__bool__,
        torch.Tensor.__int__,
        torch.Tensor.__float__,
        torch.Tensor.__index__,
        torch.Tensor.nonzero,
        torch.nonzero,
        torch.Tensor.numpy,
    }

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in self.READS
        return func(*args, **(kwargs or {}))
