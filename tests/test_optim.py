"""tinygrpo.update.optim: AdamW's parameter groups, the schedule, and OptimizerStep's clip against torch's clip_grad_norm_."""

import warnings

import pytest
import torch
from accelerate import Accelerator

from tiny_lm import TinyLMConfig, TinyLMForCausalLM
from tinygrpo.run.config import GRPOConfig
from tinygrpo.update.config import OptimizerConfig
from tinygrpo.update.optim import OptimizerStep, build_optimizer


def _model() -> TinyLMForCausalLM:
    torch.manual_seed(0)
    return TinyLMForCausalLM(TinyLMConfig(n_embd=16, n_head=2))


def _build(model, config: GRPOConfig):
    """The run's optimizer and schedule: the config's optimizer group, over its max_steps."""
    return build_optimizer(model, OptimizerConfig.of(config), config.max_steps)


def _step(model, **cfg) -> OptimizerStep:
    config = GRPOConfig(output_dir="unused", **cfg)
    optimizer, scheduler = _build(model, config)
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
    optimizer, _ = _build(model, GRPOConfig(output_dir="unused", weight_decay=0.1))
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in decayed) == (p.ndim >= 2 and "ln" not in name), name
    assert all(g["fused"] for g in optimizer.param_groups)
    optimizer, _ = _build(model, GRPOConfig(output_dir="unused"))
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
