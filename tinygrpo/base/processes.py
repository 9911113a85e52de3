"""The few collective operations GRPO needs, on one process or many (accelerate): gather, reduce, any.

Each process holds whole groups. Rewards are gathered so that advantages are computed on the global batch, counts
are summed, and "stop" or "nobody has signal" decisions are taken by every process alike. On one process every
operation is the identity, without accelerate's per-call checks.
"""

from __future__ import annotations

import torch
from accelerate import Accelerator


class Processes:
    """This process's place among the training processes, and the collectives between them."""

    def __init__(self, accelerator: Accelerator) -> None:
        self.acc = accelerator
        self.num = accelerator.num_processes
        self.rank = accelerator.process_index
        self.is_main = accelerator.is_main_process

    # The collectives run on the accelerator's device (NCCL takes GPU tensors only; gloo, CPU ones), and each
    # result comes back to its input's device: rewards and advantages live on the CPU, completions on the model's.
    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenation over processes, in rank order."""
        return self.acc.gather(t.to(self.acc.device)).to(t.device) if self.num > 1 else t

    def gather_varlen(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenation over processes of 1-D tensors whose lengths differ (padded with NaN, then dropped)."""
        if self.num == 1:
            return t
        padded = self.acc.pad_across_processes(t.float().to(self.acc.device), dim=0, pad_index=float("nan"))
        out = self.acc.gather(padded)
        return out[~out.isnan()].to(t.device, t.dtype)

    def gather_rows(self, t: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Concatenation over processes, in rank order, of tensors whose first dimension is counts[rank] on each
        (every process knows them): padded to the longest, gathered, cut back. Exact, NaN included."""
        if self.num == 1:
            return t
        m = max(counts)
        padded = torch.cat([t, t.new_zeros((m - t.size(0), *t.shape[1:]))])
        out = self.gather(padded)
        return torch.cat([out[i * m : i * m + c] for i, c in enumerate(counts)])

    def reduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        """ "sum", "mean" or "max" over processes."""
        return self.acc.reduce(t.to(self.acc.device), op).to(t.device) if self.num > 1 else t

    def sum(self, x: float) -> float:
        return float(self.reduce(torch.tensor(float(x)), "sum")) if self.num > 1 else x

    def any(self, flag: bool) -> bool:
        """True on every process if it is True on any."""
        return bool(self.reduce(torch.tensor(float(flag)), "max").item() > 0) if self.num > 1 else flag

    def wait(self) -> None:
        self.acc.wait_for_everyone()
