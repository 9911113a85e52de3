"""Where a training step's time goes by kind of work, read from `torch.profiler`: the model's arithmetic kernels,
every other ATen call, and the rest (Python, the autograd engine, the trainers' own bookkeeping).

The arithmetic kernels are the ones a transformer's layers cannot do without at these shapes with torch's kernels:
matrix products, attention, GELU and LayerNorm, forward and backward (`ARITHMETIC`). The set is kept small on
purpose: log-softmax, the optimizer and the embedding gradient count as "other", so the time it names is a lower
bound on what a step of this model must spend inside torch's CPU kernels, and a trainer whose every other call and
every line of Python cost nothing would still take that long. Against a peer's measured step that gives a ceiling
on any speed ratio reachable without faster kernels.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields

ARITHMETIC = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::gelu",
        "aten::gelu_backward",
        "aten::native_layer_norm",
        "aten::native_layer_norm_backward",
    }
)


@dataclass(frozen=True)
class OpSplit:
    """Per step: milliseconds of self time inside the arithmetic kernels and inside every other ATen call, and how
    many calls of each (composite calls such as `linear` count once each, as the profiler records them)."""

    arithmetic_ms: float
    arithmetic_calls: float
    other_ms: float
    other_calls: float


def op_split(events, steps: int) -> OpSplit:
    """`events`: a profiler's `key_averages()` over `steps` training steps. Self times add up without counting a
    nested call twice (an `addmm` inside a `linear` is the addmm's, the rest of the linear is the linear's)."""
    a_us = a_n = o_us = o_n = 0.0
    for e in events:
        if not e.key.startswith("aten::"):
            continue  # the autograd engine's and the profiler's own records: "the rest"
        if e.key in ARITHMETIC:
            a_us, a_n = a_us + e.self_cpu_time_total, a_n + e.count
        else:
            o_us, o_n = o_us + e.self_cpu_time_total, o_n + e.count
    return OpSplit(a_us / 1e3 / steps, a_n / steps, o_us / 1e3 / steps, o_n / steps)


def median_split(splits: list[OpSplit]) -> OpSplit:
    """Field by field, the median over steps profiled one at a time: a step slowed by the machine's other work does
    not move it."""
    return OpSplit(*(statistics.median(getattr(s, f.name) for s in splits) for f in fields(OpSplit)))


class StepProfile:
    """A CPU profiler started and stopped around a run of training steps, read as an `OpSplit`."""

    def __init__(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU])

    def start(self) -> None:
        self._prof.start()

    def stop(self, steps: int = 1) -> OpSplit:
        self._prof.stop()
        return op_split(self._prof.key_averages(), steps)
