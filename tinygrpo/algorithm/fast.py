"""Faster equivalents of formulas whose plain form lives in `tinygrpo.algorithm.core`, each used by the trainer only where it
equals the plain form, and each checked against it bit for bit (tests/test_fast.py).

    on_policy_surrogate   core.clipped_surrogate with old_logp None (num_iterations 1, one mini-batch): the ratio is
                          exactly 1, so -min(r A, clip(r) A) is -r A in value and in gradient, in a third of the ops
    group_advantages      core.group_advantages when no reward is NaN: its masks are identities, and are skipped
                          (about 15 fewer tensor operations per generation round)
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinygrpo.algorithm import core


def on_policy_applies(old_logp: Tensor | None, importance_sampling_level: str, delta: float | None) -> bool:
    """`on_policy_surrogate` equals core.clipped_surrogate here: on-policy, token-level ratios (a sequence ratio is 1
    too, but its statistics are per row), and no delta below 1 (delta clamps the unclipped ratio, 1 included)."""
    return old_logp is None and importance_sampling_level == "token" and (delta is None or delta >= 1)


def on_policy_surrogate(logp: Tensor, advantages: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """core.clipped_surrogate(logp, None, advantages, mask) where `on_policy_applies`: r = exp(logp - sg(logp)) is
    exactly 1, inside [1 - eps_low, 1 + eps_high], so min(r A, clip(r) A) is r A; in the gradient torch's min splits
    a tie in halves and both sides have derivative A, so the sum is exactly A (halving is exact in floating point).
    Same statistics: nothing is clipped. logp (B, T), advantages (B,)."""
    ratio = torch.exp(logp - logp.detach())  # (B, T), exactly 1
    never = torch.zeros_like(logp, dtype=torch.bool)
    per_token_loss = -(ratio * advantages.unsqueeze(-1).to(ratio.dtype))  # (B, T)
    return per_token_loss, {
        "ratio": ratio.detach(),
        "low_clipped": never,
        "high_clipped": never,
        "clipped": never,
    }


def group_advantages(
    rewards: Tensor, num_generations: int, *, mode: str, scale_rewards: str
) -> tuple[Tensor, Tensor]:
    """core.group_advantages at the trainer's settings (unbiased std, eps 1e-4) when no reward is NaN (the usual
    case): every masked step of the plain form is then the identity, and is skipped, and the per-group count is the
    plain number G. With a NaN reward, the plain form itself."""
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    G = num_generations
    r = rewards.view(-1, G)  # (P, G)
    if bool(torch.isnan(r).any()):
        return core.group_advantages(rewards, G, mode=mode, scale_rewards=scale_rewards)
    zero_std = r.amax(-1) == r.amin(-1)  # (P,)
    if mode == "reinforce":
        return r.reshape(-1), zero_std
    if mode == "rloo":
        adv = r - (r.sum(-1, keepdim=True) - r) / (G - 1)
    else:
        adv = r - r.sum(-1, keepdim=True) / G
        if scale_rewards == "group":
            adv = adv / ((adv.square().sum(-1, keepdim=True) / (G - 1)).sqrt() + 1e-4)
        elif scale_rewards == "batch":
            adv = adv / (r.reshape(-1).std() + 1e-4)  # (G >= 2: at least two rewards)
    adv = torch.where(~zero_std.unsqueeze(-1), adv, torch.zeros_like(adv))
    return adv.reshape(-1), zero_std
