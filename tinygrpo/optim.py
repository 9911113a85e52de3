"""A lean `step()` for torch's fused AdamW: the same two kernels, without the Python around them.

`torch.optim.AdamW(fused=True).step()` ends in two kernel calls per device and dtype (`_foreach_add_` on the
step counts, then `_fused_adamw_`). Around them it runs hooks, profiler records, a lazy-state scan of every
parameter and a regrouping of the tensors. On a 100 k-parameter model that wrapper cost ~0.3 ms a step on this
CPU, more than the update itself. `lean_adamw_step` calls the two kernels on the optimizer's own state, so
checkpoints, `state_dict()` and LR schedulers see the same optimizer. Whenever it cannot be sure of doing exactly
what `step()` does, it calls `step()`: at the first step, which creates the state, and when there are hooks,
tensor learning rates, amsgrad, maximize, capturable, differentiable, or mixed devices or dtypes.
tests/test_optim.py checks the parameters and state against `step()` bit for bit.
"""

from __future__ import annotations

import torch
import torch.optim.optimizer as _torch_optimizer

_UNSUPPORTED = ("amsgrad", "maximize", "capturable", "differentiable")


def lean_adamw_supported(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `lean_adamw_step` can stand in for this optimizer's `step()` (checked once, at set-up)."""
    return (
        type(optimizer) is torch.optim.AdamW
        and hasattr(torch, "_fused_adamw_")
        and all(g.get("fused") and not any(g.get(k) for k in _UNSUPPORTED) for g in optimizer.param_groups)
    )


def lean_adamw_step(optimizer: torch.optim.AdamW) -> None:
    """`optimizer.step()` for a fused AdamW that `lean_adamw_supported` accepted."""
    hooks = (optimizer._optimizer_step_pre_hooks, optimizer._optimizer_step_post_hooks,
             getattr(_torch_optimizer, "_global_optimizer_pre_hooks", None),
             getattr(_torch_optimizer, "_global_optimizer_post_hooks", None))  # fmt: skip
    if any(hooks):  # step() runs them
        optimizer.step()
        return
    state = optimizer.state
    work = []
    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            continue
        if isinstance(group["lr"], torch.Tensor) or any(p not in state for p in params):
            optimizer.step()  # tensor lr, or the first step (torch creates the state)
            return
        first = params[0]
        if any(p.device != first.device or p.dtype != first.dtype or p.grad.is_sparse for p in params):
            optimizer.step()
            return
        work.append((group, params))
    for group, params in work:
        st = [state[p] for p in params]
        steps = [s["step"] for s in st]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adamw_(
            params, [p.grad for p in params], [s["exp_avg"] for s in st], [s["exp_avg_sq"] for s in st], [], steps,
            amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"],
            eps=group["eps"], maximize=False, grad_scale=None, found_inf=None,
        )  # fmt: skip
