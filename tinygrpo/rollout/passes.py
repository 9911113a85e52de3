"""The sample_allocation rules that sample a step's prompts in passes (`sample_allocation` screen and until_signal): which
prompts get more samples is decided by what the earlier passes drew, so these rules sample as they go, unlike the
knapsack (tinygrpo/algorithm/allocation.py), which decides every prompt's share before sampling.

Each rule takes `sample(idx, sizes)`, the generator's round of one unit of each prompt of `idx` (`sizes[j]` units of
`idx[j]`) at the run's temperature, and returns the step's round with each prompt's passes merged into one group
(tinygrpo/rollout/round.py). The rules judge a unit by the rewards the advantages will see (shaped by the KL when it is in the
reward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from tinygrpo.rollout.config import RolloutConfig
from tinygrpo.rollout.round import Round, merged

Sample = Callable[[list[int], list[int] | None], Round]


def reward_range(r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, U) rewards -> each row's smallest and largest valid (not NaN) reward; +inf and -inf for a row with none,
    so that a row differs (hi > lo) exactly when two of its valid rewards differ."""
    valid = ~r.isnan()
    return torch.where(valid, r, torch.inf).amin(1), torch.where(valid, r, -torch.inf).amax(1)


def screen(sample: Sample, idx: list[int], cfg: RolloutConfig, pass_rate: torch.Tensor, pad_id: int) -> Round:
    """sample_allocation screen (SPEED, Zhang et al. 2025, arXiv 2506.09016): one unit of each prompt first;
    the prompts whose screen is mixed (rewards differ), or that were solved before but rarely (pass-rate estimate
    `pass_rate` in (0, screen_hard_below)), get the rest of a group of G; the others keep their screen alone (no
    signal when its rewards are equal: dynamic sampling drops it)."""
    U = cfg.unit
    first = sample(idx, None)
    lo, hi = reward_range(first.shaped_rewards.view(-1, U))
    ema = pass_rate[torch.tensor(idx)]
    hard = (ema > 0) & (ema < cfg.screen_hard_below)  # (NaN: unseen, neither)
    go = ((hi > lo) | hard).tolist()
    k = cfg.num_generations // U - 1
    if not any(go) or k == 0:
        return replace(first, sizes=[1] * len(idx))
    more = sample([i for i, g in zip(idx, go, strict=True) if g], [k] * sum(go))
    owners = [j for j, g in enumerate(go) if g for _ in range(k)]
    return merged(first, [more], [owners], pad_id)


def until_signal(sample: Sample, idx: list[int], cfg: RolloutConfig, pad_id: int) -> Round:
    """sample_allocation until_signal (Reinforce-Ada, Xiong et al. 2025, arXiv 2510.04996): one unit of each
    prompt, then passes of one more unit of each prompt whose rewards are still all alike, until they differ,
    the prompt has max_num_generations samples, or the round has spent its budget of P x G samples (the
    fixed rule's; the last pass takes the prompts it has room for, in order)."""
    U = cfg.unit
    first = sample(idx, None)
    lo, hi = reward_range(first.shaped_rewards.view(-1, U))
    units = torch.ones(len(idx), dtype=torch.long)
    room = len(idx) * (cfg.num_generations // U - 1)  # units left in the budget
    passes: list[Round] = []
    owners: list[list[int]] = []
    while room > 0:
        todo = torch.nonzero(~(hi > lo) & (units < cfg.max_num_generations // U)).flatten()[:room]
        if todo.numel() == 0:
            break
        s = sample([idx[j] for j in todo.tolist()], None)
        lo_s, hi_s = reward_range(s.shaped_rewards.view(-1, U))
        lo[todo], hi[todo] = torch.minimum(lo[todo], lo_s), torch.maximum(hi[todo], hi_s)
        units[todo] += 1
        room -= todo.numel()
        passes.append(s)
        owners.append(todo.tolist())
    if not passes:
        return replace(first, sizes=[1] * len(idx))
    return merged(first, passes, owners, pad_id)
