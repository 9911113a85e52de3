"""tinygrpo.update.optim: AdamW's parameter groups, the schedule, and OptimizerStep's clip against torch's clip_grad_norm_."""

import warnings

import pytest
import torch
from accelerate import Accelerator

from tiny_lm import TinyLMConfig, TinyLMForCausalLM
from tinygrpo.run.config import GRPOConfig
from tinygrpo.update.optim import OptimizerStep, build_optimizer


def _model() -> TinyLMForCausalLM:
    torch.manual_seed(0)
    return TinyLMForCausalLM(TinyLMConfig(n_embd=16, n_head=2))


def _step(model, **cfg) -> OptimizerStep:
    config = GRPOConfig(output_dir="unused", **cfg)
    optimizer, scheduler = build_optimizer(model, config)
    acc = Accelerator(cpu=True)
    module, optimizer = acc.prepare(model, optimizer)
    return OptimizerStep(module, optimizer, scheduler, acc)


def _set_grads(models, scale: float, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    for ps in zip(*(m.parameters() for m in models), strict=True):
        grad = scale * torch.randn(ps[0].shape, generator=g)
        for p in ps:
            p.grad = grad.clone()


@pytest.mark.parametrize("scale, max_norm", [(1.0, 1.0), (1e-4, 1.0), (1.0, float("inf"))])
def test_clip_equals_torch_clip_grad_norm_bit_for_bit(scale, max_norm):
    ours, theirs = _model(), _model()
    _set_grads([ours, theirs], scale)
    norm = _step(ours).clip(max_norm)
    want = torch.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm)
    assert norm == float(want)
    clipped = max_norm / (float(want) + 1e-6) < 1
    assert clipped == (scale == 1.0 and max_norm == 1.0)  # both branches are exercised
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_weight_decay_spares_biases_and_layernorms_and_one_group_without_it():
    model = _model()
    optimizer, _ = build_optimizer(model, GRPOConfig(output_dir="unused", weight_decay=0.1))
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in decayed) == (p.ndim >= 2 and "ln" not in name), name
    assert all(g["fused"] for g in optimizer.param_groups)
    optimizer, _ = build_optimizer(model, GRPOConfig(output_dir="unused"))
    assert len(optimizer.param_groups) == 1


def test_a_step_without_update_still_advances_the_schedule_quietly():
    model = _model()
    opt = _step(model, learning_rate=1e-3, lr_scheduler_type="linear", max_steps=4)
    lrs = [opt.learning_rate]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.schedule(updated=False)
    lrs.append(opt.learning_rate)
    _set_grads([model], 1.0)
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()
    opt.schedule(updated=True)
    lrs.append(opt.learning_rate)
    assert lrs == pytest.approx([1e-3, 7.5e-4, 5e-4])
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_functional_step_equals_step_bit_for_bit(weight_decay):
    # OptimizerStep (FUNCTIONAL_ADAMW: torch's functional AdamW on the optimizer's own state) against a twin that
    # calls AdamW.step(), over several steps with a learning-rate change and a parameter without gradient.
    from tinygrpo.update import optim

    assert optim.FUNCTIONAL_ADAMW
    ours, theirs = _model(), _model()
    opt = _step(ours, weight_decay=weight_decay, learning_rate=1e-2)
    assert opt.functional
    twin, _ = build_optimizer(
        theirs, GRPOConfig(output_dir="unused", weight_decay=weight_decay, learning_rate=1e-2)
    )
    functional_steps = 0
    for step in range(5):
        _set_grads([ours, theirs], 1.0, seed=step)
        if step == 2:  # a parameter without a gradient this step: left alone by both
            ours.transformer.wpe.weight.grad = theirs.transformer.wpe.weight.grad = None
        if step == 3:  # a scheduler changes the learning rate between steps
            for o in (opt.optimizer, twin):
                for group in o.param_groups:
                    group["lr"] = 3e-3
        functional_steps += optim.functional_adamw_step(opt.optimizer) if step else 0
        if not step:
            opt.step()  # the first step creates the state (step() itself)
        twin.step()
        for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(p, q)
            for k in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(opt.optimizer.state[p][k], twin.state[q][k]), k
    assert functional_steps == 4
