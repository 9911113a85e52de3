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
from torch.optim.adamw import adamw
from transformers import get_scheduler

from tinygrpo.update.config import OptimizerConfig

# The one speed switch of the update. `AdamW(fused=True).step()` runs two fused kernels, wrapped in hooks, profiler
# records and a lazy-state scan of every parameter: on this ~100 k-parameter model the wrapper cost ~0.2 ms a step,
# 3-4 % of a 4 prompts x 8 step. With FUNCTIONAL_ADAMW the same kernels are called through torch's public functional
# API (`torch.optim.adamw.adamw`) on the optimizer's own state, once that state exists; `step()` otherwise (the first
# step creates the state). Optimizer hooks are not run on that path: the trainer's optimizer has none.
# tests/test_optim.py checks parameters and state against `step()` bit for bit.
FUNCTIONAL_ADAMW = True

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
        self.functional = FUNCTIONAL_ADAMW and self.plain and functional_adamw_supported(self.optimizer)

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
        if self.functional and functional_adamw_step(self.optimizer):
            return
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


def functional_adamw_supported(optimizer: torch.optim.Optimizer) -> bool:
    """An AdamW like `build_optimizer`'s: fused, float learning rates, none of the options the functional call here
    leaves at their defaults."""
    options = ("amsgrad", "maximize", "capturable", "differentiable")
    return type(optimizer) is torch.optim.AdamW and all(
        g["fused"] and not any(g[k] for k in options) and not isinstance(g["lr"], torch.Tensor)
        for g in optimizer.param_groups
    )


def functional_adamw_step(optimizer: torch.optim.AdamW) -> bool:
    """`optimizer.step()` through `torch.optim.adamw.adamw`; False (nothing done) until every parameter with a
    gradient has its state, which `step()` creates."""
    state = optimizer.state
    work = []
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if any(p not in state for p in params):
            return False
        work.append((group, params))
    for group, params in work:
        st = [state[p] for p in params]
        beta1, beta2 = group["betas"]
        adamw(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in st],
            [s["exp_avg_sq"] for s in st],
            [],
            [s["step"] for s in st],
            fused=True,
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
        )
    return True
