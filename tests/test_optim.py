"""tinygrpo.update.optim: AdamW's parameter groups, the schedule, and OptimizerStep's clip against torch's clip_grad_norm_."""

import dataclasses
import math
import warnings
from types import SimpleNamespace

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


def _lrs_by_optimizer_step(config: GRPOConfig) -> list[float]:
    """The learning rate each of the run's optimizer steps takes: the schedule steps once a generation (its k
    optimizer steps share one learning rate), as the trainer builds and steps it."""
    k = config.updates_per_generation
    optimizer, scheduler = build_optimizer(_model(), OptimizerConfig.of(config), config.max_steps, k)
    lrs = []
    for _ in range(config.max_steps // k):
        lrs += [scheduler.get_last_lr()[0]] * k
        optimizer.step()  # (no gradients: moves nothing; the order torch expects before a schedule step)
        scheduler.step()
    return lrs


def _transformers_lr(step: int, warmup: int, total: int, kind: str) -> float:
    """transformers' linear warm-up from 0 over `warmup` schedule steps, then constant or linear to 0 at `total`
    (get_constant_schedule_with_warmup / get_linear_schedule_with_warmup, written out)."""
    if step < warmup:
        return step / warmup
    return 1.0 if kind == "constant" else max(0.0, (total - step) / (total - warmup))


@pytest.mark.parametrize("kind", ["linear", "constant"])
@pytest.mark.parametrize("warmup_steps, k, max_steps", [(1, 2, 8), (3, 2, 12), (1, 4, 16), (5, 4, 24)])
def test_warmup_steps_warm_up_every_optimizer_step_they_name_when_a_generation_makes_several(
    kind, warmup_steps, k, max_steps
):
    """With k > 1 optimizer steps a generation the schedule steps once a generation, so warmup_steps (optimizer
    steps, TRL's) becomes a number of generations: it must be rounded up (the first ceil(warmup_steps / k)
    generations warm up), never down; rounded down, warmup_steps=1 with k=2 is no warm-up at all and the first
    optimizer step runs at the peak learning rate."""
    config = GRPOConfig(
        output_dir="unused",
        num_iterations=k,
        max_steps=max_steps,
        warmup_steps=warmup_steps,
        lr_scheduler_type=kind,
        learning_rate=1.0,
    )
    assert config.updates_per_generation == k
    lrs = _lrs_by_optimizer_step(config)
    # TRL's warm-up: optimizer steps 0 .. warmup_steps-1 run below the peak, the first one at 0
    assert lrs[0] == 0.0 and all(lr < 1.0 for lr in lrs[:warmup_steps])
    # the same warm-up in whole generations: the first generation boundary at or after warmup_steps ends it
    generations = next(g for g in range(1, max_steps) if g * k >= warmup_steps)
    want = [_transformers_lr(j // k, generations, max_steps // k, kind) for j in range(max_steps)]
    assert lrs == pytest.approx(want, abs=1e-12)
    assert lrs[generations * k] == 1.0  # (the warm-up ends: the peak right after it)


@pytest.mark.parametrize(
    "warmup_steps, k, max_steps, warm",
    [(1, 1, 10, 1), (2, 1, 10, 2), (0.5, 1, 10, 5), (0.25, 1, 12, 3), (1, 2, 8, 2), (0.5, 2, 8, 4)],
)
def test_warmup_steps_of_one_is_one_step_and_below_one_a_share_of_max_steps(warmup_steps, k, max_steps, warm):
    """transformers 5 merged warmup_ratio into warmup_steps: a value in (0, 1) is a share of the steps, rounded up,
    and a whole number >= 1 counts steps. The bound is open at 1: warmup_steps=1 is one warm-up step, not a ratio
    of 1.0 (a run that warms up over all of its steps). `warm`: the optimizer steps that run below the peak (with
    k > 1, in whole generations of k)."""
    # transformers 5's rule: steps from 1 up, a share of the steps below
    theirs = warmup_steps if warmup_steps >= 1 else math.ceil(warmup_steps * max_steps)
    from transformers import TrainingArguments

    if "warmup_ratio" not in {f.name for f in dataclasses.fields(TrainingArguments)}:  # (5.x: its own code)
        fields = SimpleNamespace(warmup_steps=warmup_steps)
        assert TrainingArguments.get_warmup_steps(fields, max_steps) == theirs
    assert -(-theirs // k) * k == warm  # (the cases: transformers' count, rounded up to whole generations)
    config = GRPOConfig(
        output_dir="unused",
        num_iterations=k,
        max_steps=max_steps,
        warmup_steps=warmup_steps,
        lr_scheduler_type="constant",
        learning_rate=1.0,
    )
    lrs = _lrs_by_optimizer_step(config)
    # constant after the warm-up: the steps below the peak are the warm-up
    assert sum(lr < 1.0 for lr in lrs) == warm
    assert lrs[:warm] == pytest.approx([(j // k) * k / warm for j in range(warm)], abs=1e-12)
    assert lrs[warm:] == [1.0] * (max_steps - warm)
