"""Groups of different sizes (tinygrpo/algorithm/group_sizes.py): the size-by-size advantages against each group computed
alone, and against the uniform batch when every size is the same, bit for bit; the estimators that read the batch are
refused."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrpo.algorithm.advantage_estimators import (
    ADV_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    compute_advantages,
)
from tinygrpo.algorithm.group_sizes import (
    group_reduce,
    per_group_estimator,
    rows_of,
    sized_advantages,
    unit_group,
)

# Every estimator whose groups are independent, with the settings it runs at.
PER_GROUP = [
    ("grpo", "group"),
    ("grpo", "none"),
    ("rloo", "group"),
    ("reinforce", "group"),
    ("opo", "group"),
    ("pass_at_k", "group"),
    ("remax", "group"),
]


def _cfg(mode: str, scale: str = "group", **kw) -> AdvantageConfig:
    """The estimator's settings; pass@k at k = 1 (k < every G here: a group of one unit of 2)."""
    return AdvantageConfig(
        advantage_mode=mode, scale_rewards=scale, train_pass_k=1 if mode == "pass_at_k" else 4, **kw
    )


def _inputs(sizes: list[int], unit: int, seed: int, binary: bool) -> AdvantageInputs:
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes) * unit
    if binary:
        rewards = torch.randint(0, 2, (n,), generator=gen).float()
    else:  # a few repeated values, so that some groups are all equal, and NaN (no applicable reward)
        rewards = torch.randint(0, 4, (n,), generator=gen).float() / 3
        rewards[torch.rand(n, generator=gen) < 0.1] = float("nan")
    lengths = torch.randint(1, 9, (n,), generator=gen)
    greedy = torch.randint(0, 2, (sum(sizes),), generator=gen).float()  # one per unit (prompt row)
    return AdvantageInputs(rewards, unit, lengths=lengths, greedy_rewards=greedy)


def _alone(x: AdvantageInputs, cfg: AdvantageConfig, sizes: list[int], unit: int, j: int):
    """Group j's advantages computed on that group alone, as a uniform batch of one group."""
    rows = rows_of(torch.tensor([j]), sizes, unit)
    first_unit = sum(sizes[:j])
    sub = AdvantageInputs(
        x.rewards[rows],
        sizes[j] * unit,
        lengths=x.lengths[rows],
        greedy_rewards=x.greedy_rewards[first_unit : first_unit + 1],
    )
    return compute_advantages(sub, cfg)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=7),
    unit=st.sampled_from([2, 3, 4]),
    estimator=st.sampled_from(PER_GROUP),
    seed=st.integers(0, 10_000),
)
def test_each_group_gets_exactly_what_it_gets_alone(sizes, unit, estimator, seed):
    mode, scale = estimator
    x = _inputs(sizes, unit, seed, binary=mode == "pass_at_k")
    cfg = _cfg(mode, scale)
    adv, zero_std = sized_advantages(x, cfg, sizes, unit)
    assert adv.shape == x.rewards.shape and zero_std.shape == (len(sizes),)
    for j in range(len(sizes)):
        a, z = _alone(x, cfg, sizes, unit, j)
        assert torch.equal(adv[rows_of(torch.tensor([j]), sizes, unit)], a)  # bit for bit
        assert bool(zero_std[j]) == bool(z[0])


@pytest.mark.parametrize("mode,scale", [*PER_GROUP, ("grpo", "batch"), ("reinforce_pp", "group")])
@pytest.mark.parametrize("k", [1, 3])
def test_one_size_is_the_uniform_batch_bit_for_bit(mode, scale, k):
    """Every group of k units: the uniform estimator at G = k * unit, whatever the estimator (batch statistics too);
    None and all-ones are the uniform batch of G = unit."""
    unit, groups = 4, 5
    sizes = [k] * groups
    x = _inputs(sizes, unit, 7, binary=mode == "pass_at_k")
    cfg = _cfg(mode, scale)
    first_units = torch.arange(groups) * k
    want = compute_advantages(
        AdvantageInputs(x.rewards, k * unit, x.lengths, x.greedy_rewards[first_units]), cfg
    )
    got = sized_advantages(x, cfg, sizes, unit)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    if k == 1:
        plain = sized_advantages(x, cfg, None, unit)
        assert torch.equal(plain[0], want[0]) and torch.equal(plain[1], want[1])


@pytest.mark.parametrize(
    "cfg",
    [
        _cfg("grpo", "batch"),
        _cfg("reinforce_pp"),
        _cfg("reinforce_pp_baseline"),
        _cfg("grpo", multi_objective_aggregation="normalize_then_sum", reward_weights=[1.0]),
    ],
)
def test_estimators_that_read_the_batch_are_refused_for_several_sizes(cfg):
    assert not per_group_estimator(cfg)
    x = _inputs([1, 2], 4, 0, binary=False)
    with pytest.raises(ValueError, match="not computed group by group"):
        sized_advantages(x, cfg, [1, 2], 4)


def test_every_registered_estimator_says_whether_it_is_per_group():
    """The flag is what the refusal reads: the whitening estimators read the batch, the others do not."""
    assert {n for n, e in ADV_ESTIMATORS.items() if not e.per_group} == {
        "reinforce_pp",
        "reinforce_pp_baseline",
    }


def test_rows_units_and_group_reductions():
    sizes, unit = [2, 1, 3], 2  # rows: group 0 -> 0..3, group 1 -> 4..5, group 2 -> 6..11
    assert unit_group(sizes).tolist() == [0, 0, 1, 2, 2, 2]
    assert rows_of(torch.tensor([0, 2]), sizes, unit).tolist() == [0, 1, 2, 3, 6, 7, 8, 9, 10, 11]
    assert rows_of(torch.tensor([1]), sizes, unit).tolist() == [4, 5]
    v = torch.arange(12.0)
    assert group_reduce(v, sizes, unit, "amax").tolist() == [3.0, 5.0, 11.0]
    assert group_reduce(v, sizes, unit, "amin").tolist() == [0.0, 4.0, 6.0]
    assert group_reduce(v, sizes, unit, "sum").tolist() == [6.0, 9.0, 51.0]
    assert group_reduce(v, None, unit, "sum").tolist() == [1.0, 5.0, 9.0, 13.0, 17.0, 21.0]
