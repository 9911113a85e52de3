"""lean_adamw_step against torch's own AdamW(fused=True).step(): the same parameters and state, bit for bit."""

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from tinygrpo.optim import lean_adamw_step, lean_adamw_supported


def _twins(weight_decay: float = 0.0, **kw) -> tuple[list, list, torch.optim.AdamW, torch.optim.AdamW]:
    torch.manual_seed(0)
    shapes = [(5, 3), (3,), (4, 5), (7,)]
    a = [torch.randn(s, requires_grad=True) for s in shapes]
    b = [p.detach().clone().requires_grad_(True) for p in a]

    def groups(ps):  # two groups, as the trainer makes when weight decay is on
        return [{"params": ps[:2], "weight_decay": weight_decay}, {"params": ps[2:], "weight_decay": 0.0}]

    opt_a = torch.optim.AdamW(groups(a), lr=1e-2, betas=(0.9, 0.99), fused=True, **kw)
    opt_b = torch.optim.AdamW(groups(b), lr=1e-2, betas=(0.9, 0.99), fused=True, **kw)
    return a, b, opt_a, opt_b


def _set_grads(a: list, b: list, step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    for p, q in zip(a, b, strict=True):
        grad = torch.randn(p.shape, generator=g)
        p.grad, q.grad = grad.clone(), grad.clone()


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_same_parameters_and_state_as_step_over_several_steps_and_learning_rates(weight_decay):
    a, b, opt_a, opt_b = _twins(weight_decay)
    assert lean_adamw_supported(opt_b)
    for step in range(5):
        _set_grads(a, b, step)
        if step == 3:  # a scheduler changes the learning rate between steps
            for o in (opt_a, opt_b):
                for group in o.param_groups:
                    group["lr"] = 3e-3
        opt_a.step()
        lean_adamw_step(opt_b)
        for p, q in zip(a, b, strict=True):
            assert torch.equal(p, q)
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(opt_a.state[p][key], opt_b.state[q][key]), key
    assert float(opt_b.state[b[0]]["step"]) == 5


def test_parameters_without_gradient_are_left_alone_as_step_does():
    a, b, opt_a, opt_b = _twins()
    for step in range(3):
        _set_grads(a, b, step)
        if step == 2:
            a[1].grad = b[1].grad = None
        opt_a.step()
        lean_adamw_step(opt_b)
    for p, q in zip(a, b, strict=True):
        assert torch.equal(p, q)
    assert float(opt_b.state[b[1]]["step"]) == 2  # skipped at the third step, like step() does


def test_falls_back_to_step_when_it_cannot_be_exact():
    # Not fused, or amsgrad: not supported at all (the trainer then calls step()).
    p = torch.zeros(2, requires_grad=True)
    assert not lean_adamw_supported(torch.optim.AdamW([p], fused=False))
    assert not lean_adamw_supported(torch.optim.AdamW([p], fused=True, amsgrad=True))
    assert not lean_adamw_supported(torch.optim.Adam([p], fused=True))
    # A step hook: step() runs, so the hook runs.
    a, b, opt_a, opt_b = _twins()
    calls = []
    opt_b.register_step_post_hook(lambda *args: calls.append(1))
    for step in range(2):
        _set_grads(a, b, step)
        opt_a.step()
        lean_adamw_step(opt_b)
    assert len(calls) == 2
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    # A global optimizer hook too (registered after the first step, which always goes through step()).
    a, b, opt_a, opt_b = _twins()
    _set_grads(a, b, 0)
    opt_a.step()
    lean_adamw_step(opt_b)
    handle = register_optimizer_step_pre_hook(lambda opt, *args: calls.append(opt is opt_b))
    try:
        _set_grads(a, b, 1)
        opt_a.step()
        lean_adamw_step(opt_b)
    finally:
        handle.remove()
    assert calls[2:] == [False, True]  # the hook ran for opt_a's step() and for opt_b's
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
