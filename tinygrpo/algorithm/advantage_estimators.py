"""Advantage estimators beside the group z-score (tinygrpo.algorithm.core.group_advantages): one scalar per completion.

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

The registry: every advantage_mode is one function of one signature, registered by name with the inputs it reads
beyond the rewards (as verl's `register_adv_est`):

    @register_adv_est("my_mode", needs=("lengths",))
    def my_mode(x: AdvantageInputs, cfg: AdvantageConfig) -> (advantages (N,), zero_std (N / G,))

The trainer gathers only what an estimator `needs` (tinygrpo/rollout/generation.py); `advantage_mode` accepts every
registered name (ADVANTAGE_MODES). An estimator defined on 0/1 rewards only says so (`binary_rewards=True`, as
pass_at_k): the trainer then checks the rewards at start-up and in every round.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from tinygrpo.algorithm.core import GROUP_MODES, SCALE_REWARDS, group_advantages
from tinygrpo.base.options import ConfigError, Options, option

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


# ----------------------------------------------------------------------------------------------------------------
# the registry


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator may read: rewards (N,) in groups of num_generations (NaN = no applicable reward), and what
    it `needs`."""

    rewards: Tensor  # (N,) the weighted sum of the reward functions
    num_generations: int  # G: consecutive blocks of G rewards are one prompt's group
    lengths: Tensor | None = None  # (N,) loss tokens per completion ("lengths")
    greedy_rewards: Tensor | None = (
        None  # (N / G,) the reward of each prompt's greedy answer ("greedy_rewards")
    )
    rewards_per_func: Tensor | None = None  # (N, F) each function's reward (GDPO's normalize_then_sum)


ADV_ESTIMATORS: dict[str, AdvEstimator] = {}  # by advantage_mode: register_adv_est below


@dataclass
class AdvantageConfig(Options):
    """The rewards and how they become advantages: what the estimators read (GRPOConfig's group "rewards and
    advantages")."""

    _argument_group_name: ClassVar[str] = "rewards and advantages"

    reward_funcs: list[str] = option(
        factory=lambda: ["accuracy"],
        help="Reward functions: registered names (python -m rewards list), package.module:function, "
        "or path/to/file.py:function.",
    )
    reward_weights: list[float] | None = option(None, "One weight per reward function (default: all 1.0).")
    advantage_mode: str = option(
        "grpo",
        "Baseline, a registered estimator: grpo: group mean (and std, see scale_rewards; "
        "Shao et al. 2024); rloo: leave-one-out mean (Ahmadian et al. 2024); reinforce: raw reward; opo: the "
        "length-weighted group mean (Hao et al. 2025); pass_at_k: the pass@k objective's advantages for 0/1 "
        "rewards, k = train_pass_k (Chen et al. 2025); reinforce_pp: the reward whitened over the batch's "
        "tokens, reinforce_pp_baseline: the group mean subtracted first (REINFORCE++, Hu et al. 2025); remax: "
        "the reward of the prompt's greedy answer (one extra greedy decode per prompt; ReMax, Li et al. "
        "2023). tinygrpo/algorithm/advantage_estimators.py has the formulas.",
        choices=ADV_ESTIMATORS.keys(),
    )
    train_pass_k: int = option(
        4, "k of advantage_mode pass_at_k, 1 <= k < num_generations (Chen et al. 2025)."
    )
    multi_objective_aggregation: str = option(
        "sum_then_normalize",
        f"{', '.join(MULTI_OBJECTIVE_AGGREGATIONS)} (as TRL). sum_then_normalize: the weighted sum of the "
        "rewards, then advantage_mode; normalize_then_sum: each reward z-scored in its group, then the weighted "
        "sum, z-scored over the batch (GDPO, Liu et al. 2026; advantage_mode and scale_rewards unused).",
        choices=MULTI_OBJECTIVE_AGGREGATIONS,
    )
    scale_rewards: str = option(
        "group",
        f"For advantage_mode grpo: {', '.join(SCALE_REWARDS)} (none = Dr. GRPO, Liu et al. 2025).",
        choices=SCALE_REWARDS,
    )

    @property
    def binary_rewards(self) -> bool:
        """The advantages come from an estimator defined on 0/1 rewards only (normalize_then_sum uses none)."""
        if self.multi_objective_aggregation != "sum_then_normalize":
            return False
        return ADV_ESTIMATORS[self.advantage_mode].binary_rewards

    def rules(self) -> None:
        # train_pass_k is pass@k's: set for another mode it would do nothing, silently.
        if self.advantage_mode != "pass_at_k" and self.train_pass_k != 4:
            raise ConfigError(
                f"train_pass_k={self.train_pass_k} is read by advantage_mode pass_at_k only; this run's is "
                f"{self.advantage_mode}"
            )
        # A run needs a reward; reward_weights pairs with reward_funcs one to one.
        if not self.reward_funcs:
            raise ConfigError("reward_funcs is empty: give at least one reward function")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ConfigError(
                f"reward_weights has {len(self.reward_weights)} values for {len(self.reward_funcs)} reward_funcs"
            )
        # All weights 0: every combined reward is 0, every group has zero variance, and no step has anything to
        # learn from (the run would finish with rc 0 and the weights it started with).
        if self.reward_weights is not None and not any(self.reward_weights):
            raise ConfigError(
                f"reward_weights are all 0 ({self.reward_weights}): every combined reward would be 0 and the run "
                "could not learn anything; give at least one reward function a non-zero weight"
            )


AdvEstFn = Callable[[AdvantageInputs, AdvantageConfig], tuple[Tensor, Tensor]]
NEEDS = ("lengths", "greedy_rewards")  # the inputs beyond the rewards an estimator may ask for


@dataclass(frozen=True)
class AdvEstimator:
    fn: AdvEstFn
    needs: tuple[str, ...]  # members of NEEDS
    # Defined on 0/1 rewards only (None allowed): the start-up probe checks every reward function's combined value
    # on every training row, and each round its rewards, so that a run fails with one line, not mid-run.
    binary_rewards: bool = False
    # A group's advantages depend on that group's inputs only (not on batch statistics): groups of several sizes
    # can then be computed size by size (tinygrpo/algorithm/group_sizes.py).
    per_group: bool = True


def register_adv_est(
    name: str, needs: tuple[str, ...] = (), *, binary_rewards: bool = False, per_group: bool = True
) -> Callable[[AdvEstFn], AdvEstFn]:
    """Register an advantage estimator as advantage_mode `name`; `needs`: the inputs it reads beyond the rewards;
    `binary_rewards`: it is defined on 0/1 rewards only (the trainer checks them); `per_group`: a group's advantages
    depend on that group only (False for statistics over the batch: groups of several sizes are then refused)."""

    def register(fn: AdvEstFn) -> AdvEstFn:
        if name in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        if not set(needs) <= set(NEEDS):
            raise ValueError(f"advantage estimator {name!r}: needs must be among {NEEDS}, got {needs}")
        ADV_ESTIMATORS[name] = AdvEstimator(fn, tuple(needs), binary_rewards, per_group)
        return fn

    return register


def _register_group_mode(mode: str) -> None:
    register_adv_est(mode)(
        lambda x, cfg: group_advantages(
            x.rewards, x.num_generations, mode=mode, scale_rewards=cfg.scale_rewards
        )
    )


for _mode in GROUP_MODES:  # grpo, rloo, reinforce: core.group_advantages
    _register_group_mode(_mode)


@register_adv_est("opo", needs=("lengths",))
def _opo(x: AdvantageInputs, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    return opo_advantages(x.rewards, x.lengths, x.num_generations)


@register_adv_est("pass_at_k", binary_rewards=True)
def _pass_at_k(x: AdvantageInputs, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    return pass_at_k_advantages(x.rewards, x.num_generations, cfg.train_pass_k)


@register_adv_est("reinforce_pp", needs=("lengths",), per_group=False)
def _reinforce_pp(x: AdvantageInputs, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    return reinforce_pp_advantages(x.rewards, x.lengths, x.num_generations, baseline=False)


@register_adv_est("reinforce_pp_baseline", needs=("lengths",), per_group=False)
def _reinforce_pp_baseline(x: AdvantageInputs, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    return reinforce_pp_advantages(x.rewards, x.lengths, x.num_generations, baseline=True)


@register_adv_est("remax", needs=("greedy_rewards",))
def _remax(x: AdvantageInputs, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    return remax_advantages(x.rewards, x.greedy_rewards, x.num_generations)


ADVANTAGE_MODES = tuple(ADV_ESTIMATORS)  # the registered names, for config choices and help


def gdpo_advantages(x: AdvantageInputs, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    """multi_objective_aggregation "normalize_then_sum" (GDPO, as TRL): the rewards are `normalize_then_sum` of
    rewards_per_func, and the advantages those, less the batch mean, over the batch std + 1e-4 (advantage_mode and
    scale_rewards are not used); groups whose summed scores are all equal get 0."""
    G, F = x.num_generations, x.rewards_per_func.size(-1)
    weights = cfg.reward_weights if cfg.reward_weights is not None else [1.0] * F
    summed = normalize_then_sum(x.rewards_per_func, torch.tensor(weights, dtype=torch.float64), G)
    r, valid, zero_std = _groups(summed, G)
    flat = summed[~torch.isnan(summed)]
    std = flat.std() if flat.numel() > 1 else torch.zeros((), dtype=summed.dtype)
    mean = flat.mean() if flat.numel() else torch.zeros((), dtype=summed.dtype)
    return _finish((r - mean) / (std + GDPO_EPS), valid, zero_std)


def compute_advantages(x: AdvantageInputs, cfg: AdvantageConfig) -> tuple[Tensor, Tensor]:
    """The advantages of cfg.advantage_mode (the registry), or GDPO's when the rewards are normalised per function
    first; and each group's zero_std."""
    if cfg.multi_objective_aggregation == "normalize_then_sum":
        return gdpo_advantages(x, cfg)
    if cfg.advantage_mode not in ADV_ESTIMATORS:
        raise ValueError(f"mode must be one of {tuple(ADV_ESTIMATORS)}, got {cfg.advantage_mode!r}")
    return ADV_ESTIMATORS[cfg.advantage_mode].fn(x, cfg)


def advantages(
    rewards: Tensor,
    G: int,
    *,
    mode: str = "grpo",
    scale_rewards: str = "group",
    lengths: Tensor | None = None,
    greedy_rewards: Tensor | None = None,
    k: int = 4,
    rewards_per_func: Tensor | None = None,
    reward_weights: Tensor | None = None,
    multi_objective_aggregation: str = "sum_then_normalize",
) -> tuple[Tensor, Tensor]:
    """compute_advantages with keywords: the advantages of `mode` (ADVANTAGE_MODES) and each group's zero_std.
    `rewards` are the weighted sums; see gdpo_advantages for multi_objective_aggregation "normalize_then_sum"."""
    weights = None if reward_weights is None else reward_weights.tolist()
    funcs = ["r"] * (1 if weights is None else len(weights))
    cfg = AdvantageConfig(funcs, weights, mode, k, multi_objective_aggregation, scale_rewards)
    return compute_advantages(AdvantageInputs(rewards, G, lengths, greedy_rewards, rewards_per_func), cfg)
