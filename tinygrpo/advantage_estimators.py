"""Advantage estimators beside the group z-score (tinygrpo.core.group_advantages): one scalar per completion.

    opo                    r - sum_j l_j r_j / sum_j l_j        OPO (Hao et al. 2025): the length-weighted baseline
    pass_at_k              the pass@k objective's advantages    Chen et al. 2025 (binary rewards)
    reinforce_pp           whiten(r) over the batch's tokens    REINFORCE++ (Hu et al. 2025)
    reinforce_pp_baseline  whiten(r - group mean)               REINFORCE++-baseline (Hu et al. 2025)
    remax                  r - r(greedy answer)                 ReMax (Li et al. 2023)
and GDPO's multi-reward aggregation (normalise each reward in its group, then sum; TRL's
multi_objective_aggregation="normalize_then_sum").

Conventions as group_advantages: rewards (N,) in groups of G consecutive completions; NaN = no applicable reward,
left out of every statistic, advantage exactly 0; `zero_std` (N / G,) marks groups whose valid rewards are all equal
(no sample is better than another: dynamic sampling drops them). Lengths count a completion's loss tokens (EOS
included), as verl's response mask.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .core import group_advantages

GROUP_MODES = ("grpo", "rloo", "reinforce")
ADVANTAGE_MODES = (*GROUP_MODES, "opo", "pass_at_k", "reinforce_pp", "reinforce_pp_baseline", "remax")
LENGTH_MODES = ("opo", "reinforce_pp", "reinforce_pp_baseline")  # the estimators that read completion lengths
MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
WHITEN_EPS = 1e-8  # verl's masked_whiten
GDPO_EPS = 1e-4  # TRL's


def _groups(rewards: Tensor, G: int) -> tuple[Tensor, Tensor, Tensor]:
    """(P, G) rewards with NaN -> 0, their validity, and zero_std (all valid rewards equal, or fewer than 2)."""
    if rewards.dim() != 1 or rewards.numel() % G:
        raise ValueError(
            f"rewards must be 1-D with a multiple of G={G} entries, got shape {tuple(rewards.shape)}"
        )
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    r = rewards.view(-1, G)
    valid = ~torch.isnan(r)
    hi = torch.where(valid, r, -torch.inf).amax(-1)
    lo = torch.where(valid, r, torch.inf).amin(-1)
    zero_std = (hi == lo) | (valid.sum(-1) < 2)
    return torch.where(valid, r, torch.zeros_like(r)), valid, zero_std


def _finish(adv: Tensor, valid: Tensor, zero_std: Tensor) -> tuple[Tensor, Tensor]:
    keep = valid & ~zero_std.unsqueeze(-1)
    return torch.where(keep, adv, torch.zeros_like(adv)).reshape(-1), zero_std


def _no_signal(adv: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """For estimators whose signal is not "the rewards differ": zero_std marks the groups whose advantages are all
    0 (ReMax: every sample scored its greedy answer's reward; pass@k: too few wrong samples for k to fail)."""
    adv = torch.where(valid, adv, torch.zeros_like(adv))
    return adv.reshape(-1), ~adv.ne(0).any(-1)


def opo_advantages(rewards: Tensor, lengths: Tensor, G: int) -> tuple[Tensor, Tensor]:
    """OPO (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline"; verl's "opo"): A_i = r_i - b with
    b = sum_j l_j r_j / sum_j l_j over the group's valid samples. The variance-optimal baseline when the squared norm
    of grad log pi(y) grows in proportion to the length of y. No std scaling."""
    r, valid, zero_std = _groups(rewards, G)
    ell = torch.where(valid, lengths.view(-1, G).to(r.dtype), torch.zeros_like(r))
    b = (ell * r).sum(-1, keepdim=True) / ell.sum(-1, keepdim=True).clamp(min=1)
    return _finish(r - b, valid, zero_std)


def pass_at_k_advantages(rewards: Tensor, G: int, k: int) -> tuple[Tensor, Tensor]:
    """The pass@k objective's analytic advantages (Chen et al. 2025, "Pass@k Training for Adaptively Balancing
    Exploration and Exploitation"): with n valid 0/1 rewards of which c are 1, the group's pass@k estimate is
    R = 1 - C(n - c, k) / C(n, k) and sigma = sqrt(R (1 - R)); a correct sample gets (1 - R) / sigma, a wrong one
    (1 - R - C(n - c - 1, k - 1) / C(n - 1, k - 1)) / sigma. A wrong sample is only pushed down by the chance that
    every group of k it belongs to fails. k = 1 is GRPO's population-std z-score. Groups where R is 0 or 1 (all
    wrong, or too few wrong for k of them to fail together) get 0 and are zero_std (no signal). k = G would leave
    no signal in any group: k < G."""
    if not 1 <= k < G:
        raise ValueError(f"k must be in [1, G={G}), got {k}")
    r, valid, zero_std = _groups(rewards, G)
    if bool(((r != 0) & (r != 1) & valid).any()):
        bad = r[(r != 0) & (r != 1) & valid][0].item()
        raise ValueError(f"advantage_mode pass_at_k needs 0/1 rewards, got {bad}")
    adv = torch.zeros_like(r)
    for p, (row, ok) in enumerate(zip(r.tolist(), valid.tolist(), strict=True)):
        n = sum(ok)
        c = int(sum(x for x, v in zip(row, ok, strict=True) if v))
        if n < k:
            continue
        pass_k = 1 - math.comb(n - c, k) / math.comb(n, k)
        sigma = math.sqrt(pass_k * (1 - pass_k))
        if sigma == 0:
            continue
        wrong = (1 - pass_k - math.comb(n - c - 1, k - 1) / math.comb(n - 1, k - 1)) / sigma
        adv[p] = torch.tensor([(1 - pass_k) / sigma if x == 1 else wrong for x in row], dtype=r.dtype)
    return _no_signal(adv, valid)


def whiten_over_tokens(x: Tensor, lengths: Tensor, valid: Tensor) -> Tensor:
    """(x - mu) / sqrt(var + 1e-8) with mu and the unbiased var over the batch's TOKENS (verl's masked_whiten of a
    per-sequence value broadcast over its tokens): a sequence counts once per token it has."""
    w = torch.where(valid, lengths.to(x.dtype), torch.zeros_like(x))
    n = w.sum()
    mu = (w * x).sum() / n.clamp(min=1)
    var = (w * (x - mu).square()).sum() / (n - 1).clamp(min=1)
    return (x - mu) * torch.rsqrt(var + WHITEN_EPS)


def reinforce_pp_advantages(
    rewards: Tensor, lengths: Tensor, G: int, *, baseline: bool
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu et al. 2025, "REINFORCE++: Stabilizing Critic-Free Policy Optimization with Global Advantage
    Normalization"; verl's reinforce_plus_plus with gamma 1 and an outcome reward): the reward whitened over every
    token of the batch. With `baseline` (reinforce_pp_baseline) the group mean is subtracted first (no std)."""
    r, valid, zero_std = _groups(rewards, G)
    x = r
    if baseline:
        mean = r.sum(-1, keepdim=True) / valid.sum(-1, keepdim=True).clamp(min=1)
        x = r - mean
    adv = whiten_over_tokens(x.reshape(-1), lengths.reshape(-1), valid.reshape(-1)).view_as(r)
    if not baseline:  # no baseline: every valid sample keeps its (whitened) reward, as in "reinforce"
        return torch.where(valid, adv, torch.zeros_like(adv)).reshape(-1), zero_std
    return _finish(adv, valid, zero_std)


def remax_advantages(rewards: Tensor, greedy_rewards: Tensor, G: int) -> tuple[Tensor, Tensor]:
    """ReMax (Li et al. 2023, "ReMax: A Simple, Effective, and Efficient RL Method for Aligning LLMs"): A = r - b,
    b the reward of the prompt's greedy completion (P,), one extra greedy decode per prompt. No std scaling. A NaN
    baseline (no reward applies to the greedy answer) falls back to the group mean. A group whose samples all score
    the same still has signal when the greedy answer scores otherwise (all wrong, greedy right: every sample is
    pushed down); zero_std marks the groups whose advantages are all 0."""
    r, valid, _ = _groups(rewards, G)
    mean = r.sum(-1) / valid.sum(-1).clamp(min=1)
    b = torch.where(torch.isnan(greedy_rewards), mean, greedy_rewards.to(r.dtype))
    return _no_signal(r - b.unsqueeze(-1), valid)


def normalize_then_sum(rewards_per_func: Tensor, weights: Tensor, G: int) -> Tensor:
    """GDPO (Liu et al. 2026, "Group reward-Decoupled Normalization Policy Optimization"; TRL's
    multi_objective_aggregation="normalize_then_sum"): each reward function's rewards z-scored in their group
    ((r - mean) / (unbiased std + 1e-4), NaN left out), then the weighted sum over functions. (N, F), (F,) -> (N,);
    NaN where every function returned None. A reward with a small spread is not drowned by one with a large one."""
    # Each function's column is GRPO's group z-score (unbiased std, eps 1e-4; NaN and all-equal groups -> 0).
    z = torch.stack([group_advantages(col, G, eps=GDPO_EPS)[0] for col in rewards_per_func.unbind(-1)], -1)
    out = (z * weights.to(z.dtype)).sum(-1)  # (N,)
    return torch.where((~torch.isnan(rewards_per_func)).any(-1), out, torch.full_like(out, math.nan))


def advantages(
    rewards: Tensor,
    G: int,
    *,
    mode: str = "grpo",
    scale_rewards: str = "group",
    lengths: Tensor | None = None,
    greedy_rewards: Tensor | None = None,
    k: int = 1,
    rewards_per_func: Tensor | None = None,
    reward_weights: Tensor | None = None,
    multi_objective_aggregation: str = "sum_then_normalize",
) -> tuple[Tensor, Tensor]:
    """The advantages of `mode` (ADVANTAGE_MODES) and each group's zero_std. `rewards` are the weighted sums.

    multi_objective_aggregation "normalize_then_sum" (GDPO, as TRL): the rewards are `normalize_then_sum` of
    rewards_per_func, and the advantages those, less the batch mean, over the batch std + 1e-4 (mode and
    scale_rewards are not used); groups whose summed scores are all equal get 0."""
    if multi_objective_aggregation == "normalize_then_sum":
        summed = normalize_then_sum(rewards_per_func, reward_weights, G)
        r, valid, zero_std = _groups(summed, G)
        flat = summed[~torch.isnan(summed)]
        std = flat.std() if flat.numel() > 1 else torch.zeros((), dtype=summed.dtype)
        mean = flat.mean() if flat.numel() else torch.zeros((), dtype=summed.dtype)
        return _finish((r - mean) / (std + GDPO_EPS), valid, zero_std)
    if mode in GROUP_MODES:
        return group_advantages(rewards, G, mode=mode, scale_rewards=scale_rewards)
    if mode == "opo":
        return opo_advantages(rewards, lengths, G)
    if mode == "pass_at_k":
        return pass_at_k_advantages(rewards, G, k)
    if mode in ("reinforce_pp", "reinforce_pp_baseline"):
        return reinforce_pp_advantages(rewards, lengths, G, baseline=mode == "reinforce_pp_baseline")
    if mode == "remax":
        return remax_advantages(rewards, greedy_rewards, G)
    raise ValueError(f"mode must be one of {ADVANTAGE_MODES}, got {mode!r}")
