"""Groups of different sizes: a number of samples per prompt.

A step may give each prompt its own number of samples (tinygrpo/algorithm/allocation.py). Sampling and scoring keep one size,
the *unit* of U completions per prompt row, so that the grouped fast path still encodes a prompt once for its U
samples; a prompt given k units is k consecutive prompt rows, and its group (what its advantages are relative to)
is their k * U consecutive completions. `sizes` lists each group's number of units, in order; None means one unit
each: the uniform batch of G = U.

The advantages of groups of several sizes are computed size by size: the groups of one size are gathered, the
estimator runs on them as on a uniform batch of that G, and the results go back in place. So each group's advantages
are exactly, bit for bit, what the estimator gives that group alone, for every estimator whose advantages of a group
depend on that group only (`per_group`: not scale_rewards "batch", REINFORCE++'s whitening over the batch, or GDPO's
batch z-score). tests/test_group_sizes.py checks both against the uniform computation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from tinygrpo.algorithm.advantage_estimators import (
    ADV_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    compute_advantages,
)


def uniform(sizes: Sequence[int] | None) -> bool:
    """Every group has the same number of units (or `sizes` is None)."""
    return sizes is None or len(set(sizes)) <= 1


def unit_group(sizes: Sequence[int]) -> Tensor:
    """(units,) the group of each unit: group j repeated sizes[j] times."""
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.as_tensor(sizes, dtype=torch.long))


def group_starts(sizes: Sequence[int], unit: int) -> Tensor:
    """(groups,) the first completion row of each group."""
    rows = torch.as_tensor(sizes, dtype=torch.long) * unit
    return torch.cumsum(rows, 0) - rows


def rows_of(groups: Tensor, sizes: Sequence[int], unit: int) -> Tensor:
    """The completion rows of `groups` (ascending group indices), each group's in order, concatenated."""
    starts, n = group_starts(sizes, unit), torch.as_tensor(sizes, dtype=torch.long)[groups] * unit
    offsets = torch.repeat_interleave(starts[groups] - (torch.cumsum(n, 0) - n), n)
    return torch.arange(int(n.sum())) + offsets


def per_group_estimator(cfg: AdvantageConfig) -> bool:
    """The run's advantages of a group depend on that group only (what groups of several sizes need)."""
    if cfg.multi_objective_aggregation != "sum_then_normalize":
        return False  # GDPO: z-scored over the batch
    if cfg.advantage_mode in ("grpo",) and cfg.scale_rewards == "batch":
        return False
    return ADV_ESTIMATORS[cfg.advantage_mode].per_group


def sized_advantages(
    x: AdvantageInputs, cfg: AdvantageConfig, sizes: Sequence[int] | None, unit: int
) -> tuple[Tensor, Tensor]:
    """compute_advantages for groups of `sizes` units of `unit` completions each (None: one unit each, G = unit):
    (N,) advantages and (groups,) zero_std. `x.greedy_rewards`, where given, holds one value per unit (each prompt
    row's greedy answer); a group reads its first unit's."""
    if sizes is None:
        return compute_advantages(x if x.num_generations == unit else replace(x, num_generations=unit), cfg)
    first = group_starts(sizes, 1)  # each group's first unit
    greedy = None if x.greedy_rewards is None else x.greedy_rewards[first]
    if uniform(sizes):  # one size: the uniform batch of G = k * unit, as it is
        g = sizes[0] * unit if sizes else unit
        return compute_advantages(replace(x, greedy_rewards=greedy, num_generations=g), cfg)
    if not per_group_estimator(cfg):
        raise ValueError(
            f"advantage_mode {cfg.advantage_mode!r} with scale_rewards {cfg.scale_rewards!r} and "
            f"{cfg.multi_objective_aggregation} is not computed group by group: groups of several sizes need one "
            "that is"
        )
    adv = torch.empty(x.rewards.shape, dtype=_float(x.rewards).dtype)
    zero_std = torch.empty(len(sizes), dtype=torch.bool)
    size_of = torch.as_tensor(sizes, dtype=torch.long)
    for k in sorted(set(sizes)):
        idx = torch.nonzero(size_of == k).flatten()
        rows = rows_of(idx, sizes, unit)
        sub = AdvantageInputs(
            x.rewards[rows],
            k * unit,
            lengths=None if x.lengths is None else x.lengths[rows],
            greedy_rewards=None if greedy is None else greedy[idx],
            rewards_per_func=None if x.rewards_per_func is None else x.rewards_per_func[rows],
        )
        a, z = compute_advantages(sub, cfg)
        adv[rows], zero_std[idx] = a.to(adv.dtype), z
    return adv, zero_std


def _float(t: Tensor) -> Tensor:
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


def group_reduce(values: Tensor, sizes: Sequence[int] | None, unit: int, op: str) -> Tensor:
    """(N,) per-completion values -> (groups,) each group's "amax", "amin" or "sum" (NaN propagates)."""
    if op not in ("amax", "amin", "sum"):
        raise ValueError(f"op must be amax, amin or sum, got {op!r}")
    per_unit = getattr(values.view(-1, unit), op)(1)  # (units,)
    if sizes is None:
        return per_unit
    out = torch.zeros(len(sizes), dtype=per_unit.dtype)
    return out.scatter_reduce(0, unit_group(sizes), per_unit, op, include_self=False)
