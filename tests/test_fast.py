"""tinygrpo.algorithm.fast: each faster form against its plain form in tinygrpo.algorithm.core, bit for bit, where the trainer uses it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tinygrpo.algorithm import fast
from tinygrpo.algorithm.core import GROUP_MODES, SCALE_REWARDS, clipped_surrogate, group_advantages
from tinygrpo.algorithm.fast import on_policy_applies
from tinygrpo.algorithm.loss_config import LossConfig
from tinygrpo.algorithm.policy_losses import POLICY_LOSSES
from tinygrpo.run.config import GRPOConfig


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
    takes tinygrpo.algorithm.fast's path where it applies, against core.clipped_surrogate with old_logp = logp.detach(): the
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


@pytest.mark.parametrize("mode", GROUP_MODES)
@pytest.mark.parametrize("scale_rewards", SCALE_REWARDS)
def test_group_advantages_without_nan_equal_the_plain_form(mode, scale_rewards):
    """fast.group_advantages against core.group_advantages, bit for bit: rewards with ties, all-equal groups, binary
    and continuous, G from 2 to 9, float32 and float64; with a NaN present it is the plain form itself."""
    g = torch.Generator().manual_seed(11)
    cases = 0
    for G in (2, 3, 4, 7, 8, 9):
        for dtype in (torch.float32, torch.float64):
            for kind in ("binary", "ties", "continuous"):
                P = 6
                if kind == "binary":
                    r = (torch.rand(P * G, generator=g) < 0.5).to(dtype)
                elif kind == "ties":
                    r = torch.randint(0, 3, (P * G,), generator=g).to(dtype) * 0.3
                else:
                    r = torch.randn(P * G, generator=g, dtype=dtype)
                r.view(P, G)[0] = r.view(P, G)[0, 0]  # one group all equal: zero_std
                want = group_advantages(r, G, mode=mode, scale_rewards=scale_rewards)
                got = fast.group_advantages(r, G, mode=mode, scale_rewards=scale_rewards)
                assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (G, dtype, kind)
                assert want[1][0] and not want[1].all()
                cases += 1
                with_nan = r.clone()
                with_nan[1] = float("nan")
                want = group_advantages(with_nan, G, mode=mode, scale_rewards=scale_rewards)
                got = fast.group_advantages(with_nan, G, mode=mode, scale_rewards=scale_rewards)
                assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert cases == 36
