"""tinygrpo.fast: each faster form against its plain form in tinygrpo.core, bit for bit, where the trainer uses it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tinygrpo.config import GRPOConfig
from tinygrpo.core import clipped_surrogate
from tinygrpo.fast import on_policy_applies
from tinygrpo.loss_config import LossConfig
from tinygrpo.policy_losses import POLICY_LOSSES


@pytest.mark.parametrize(
    ("kw", "fast"),
    [
        ({}, True),  # GRPO's clip
        ({"epsilon": 0.0, "epsilon_high": 0.0}, True),  # r == 1 sits on both clip edges
        ({"epsilon_high": 0.28, "delta": 1.5}, True),  # clip-higher, two-sided
        ({"epsilon": 0.2, "delta": 0.5}, False),  # delta below 1 binds even at r == 1: the plain path
        ({"importance_sampling_level": "sequence"}, False),  # GSPO: a row's ratio spreads over its tokens
    ],
)
def test_on_policy_clip_equals_the_plain_form_with_old_logp_detached(kw, fast):
    """The registered clip loss on-policy (old_logp None: the trainer's num_iterations 1, one mini-batch), which
    takes tinygrpo.fast's path where it applies, against core.clipped_surrogate with old_logp = logp.detach(): the
    same per-token loss, statistics and gradient, bit for bit."""
    cfg = replace(LossConfig.from_config(GRPOConfig()), **kw)
    assert on_policy_applies(None, cfg.importance_sampling_level, cfg.delta) is fast
    g = torch.Generator().manual_seed(3)
    base = torch.randn(5, 4, generator=g, dtype=torch.float64)
    adv = torch.randn(5, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 4, generator=g) < 0.7
    results = []
    for registered in (True, False):
        logp = base.clone().requires_grad_(True)
        if registered:
            loss, stats = POLICY_LOSSES["grpo"].fn(logp, None, adv, mask, cfg)
        else:
            loss, stats = clipped_surrogate(
                logp,
                logp.detach(),
                adv,
                mask,
                epsilon_low=cfg.epsilon,
                epsilon_high=cfg.epsilon_high,
                delta=cfg.delta,
                importance_sampling_level=cfg.importance_sampling_level,
            )
        (grad,) = torch.autograd.grad((loss * mask).sum(), logp)
        results.append((loss.detach(), stats, grad))
    (loss_a, st_a, grad_a), (loss_b, st_b, grad_b) = results
    assert torch.equal(loss_a, loss_b)
    assert torch.equal(grad_a, grad_b)
    assert grad_a.abs().sum() > 0
    for key in ("ratio", "low_clipped", "high_clipped", "clipped"):
        assert torch.equal(st_a[key].expand_as(mask), st_b[key].expand_as(mask)), key
