"""The optimizer side of an update: AdamW and its learning-rate schedule, and the backward / clip / step calls.

Under plain data parallelism (one process, or DDP over gloo/NCCL) with no loss scaler and no gradient accumulation,
the backward, the gradient clipping and the optimizer step are torch's own public calls: accelerate's wrappers add
nothing there but per-call checks. Under DeepSpeed, FSDP or mixed-precision scaling, accelerate's versions are used.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import DistributedType
from transformers import get_scheduler

from tinygrpo.update.config import OptimizerConfig

PLAIN = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)


def build_optimizer(
    model: nn.Module, cfg: OptimizerConfig, max_steps: int, updates_per_generation: int = 1
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW (no weight decay on biases and LayerNorms) and the schedule over max_steps optimizer steps, stepped once
    a generation of `updates_per_generation` (OptimizerConfig.schedule)."""
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "ln" in n else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.weight_decay == 0:  # one group, one fused kernel: the split only matters with decay
        groups = [{"params": decay + no_decay, "weight_decay": 0.0}]
    # fused: one kernel for all parameter tensors, not a Python loop over them
    optimizer = torch.optim.AdamW(
        groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon, fused=True
    )
    steps, warmup = cfg.schedule(max_steps, updates_per_generation)
    name = cfg.lr_scheduler_type
    if name == "constant" and warmup:
        name = "constant_with_warmup"  # transformers' "constant" ignores warm-up
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=steps)
    return optimizer, scheduler


class OptimizerStep:
    """zero_grad -> backward -> clip -> step for the prepared policy module, and one schedule step per training
    step. The scheduler is not prepared by accelerate: its wrapper would step it once per process per call (it
    assumes the per-process batch was split from a global one); here every process makes the same optimizer steps.
    """

    def __init__(self, module: nn.Module, optimizer, scheduler, accelerator: Accelerator) -> None:
        self.acc = accelerator
        self.plain = (
            accelerator.distributed_type in PLAIN
            and accelerator.scaler is None
            and accelerator.gradient_accumulation_steps == 1
        )
        # accelerate's wrapper (the one its checkpoints know) steps the torch optimizer inside; call that directly.
        self.optimizer = optimizer.optimizer if self.plain else optimizer
        self.scheduler = scheduler
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]

    def zero_grad(self) -> None:
        if self.plain:
            # what zero_grad(set_to_none=True) does, without its per-call profiling. None, not zeros: under
            # cuda_graphs the graphed backward hands .grad its own buffer (tinygrpo/model/static_shapes.py)
            for p in self.params:
                p.grad = None
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        if self.plain:
            loss.backward()  # DDP's hooks still all-reduce the gradients
        else:
            self.acc.backward(loss)

    def clip(self, max_norm: float) -> float:
        """Clip the gradients to `max_norm` (inf: measure only); returns the norm before clipping."""
        if not self.plain:
            return float(self.acc.clip_grad_norm_(self.module.parameters(), max_norm))
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return 0.0
        norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        if max_norm / (norm + 1e-6) < 1:  # torch's clip_grad_norm_ coefficient; no multiply by 1.0 otherwise
            torch.nn.utils.clip_grads_with_norm_(self.params, max_norm, norm, foreach=True)
        return float(norm)

    def step(self) -> None:
        self.optimizer.step()

    def schedule(self, updated: bool) -> None:
        """One schedule step per training step, also when no update was made (the schedule follows the steps)."""
        if updated:
            self.scheduler.step()
            return
        with warnings.catch_warnings():  # torch warns of a scheduler step without an optimizer step
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            self.scheduler.step()

    @property
    def learning_rate(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def state_dict(self) -> dict:
        """The schedule's state; the optimizer's own (moments, steps) is saved with the model by accelerate's
        save_state, which knows the prepared optimizer."""
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
