"""tinygrpo.algorithm.core against independent computations: the seed's tabular GRPO step, plain-Python loops, torch's own
log_softmax / kl_divergence, and Monte Carlo over many samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _numerics import assert_same_math
from torch.distributions import Categorical
from torch.distributions.kl import kl_divergence

from tinygrpo.algorithm import core
from tinygrpo.algorithm.core import (
    aggregate_loss,
    clipped_surrogate,
    entropy_from_logits,
    full_kl,
    group_advantages,
    kl_estimate,
    masked_mean,
    selective_log_softmax,
)
from tinygrpo.algorithm.policy_losses import POLICY_LOSSES

# ---------------------------------------------------------------------------------------------------------------
# token-level oracle: one-token completions from a table "model" == the seed demo's tabular GRPO step


def _seed_group_advantages(rewards, eps=1e-8):  # demo.py's numpy version
    r = np.asarray(rewards, dtype=np.float64)
    std = r.std()
    if std < 1e-6:
        return np.zeros_like(r, dtype=np.float32)
    return ((r - r.mean()) / (std + eps)).astype(np.float32)


def _seed_group_loss(table, old_table, ref_table, q, answers, adv, clip_eps, beta):
    """demo.py's grpo_step loss for one question, generalised to an old policy that differs from the current."""
    answers_t = torch.tensor(answers)
    old_lp = Categorical(logits=old_table[q]).log_prob(answers_t).detach()
    dist = Categorical(logits=table[q])
    ratio = torch.exp(dist.log_prob(answers_t) - old_lp)
    adv_t = torch.tensor(adv)
    surr1 = ratio * adv_t
    surr2 = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv_t
    clip_loss = -torch.min(surr1, surr2).mean()
    return clip_loss + beta * kl_divergence(dist, Categorical(logits=ref_table[q]))


def _tabular_setup(seed=0, n_q=5, n_ans=13, group=8, questions=(0, 3, 4)):
    g = torch.Generator().manual_seed(seed)
    # float64: the seed's Categorical and our log-softmax are two orders of the same sums (tests/_numerics.py)
    table = torch.randn(n_q, n_ans, generator=g, dtype=torch.float64).requires_grad_()
    old_table = table.detach() + 0.6 * torch.randn(
        n_q, n_ans, generator=g, dtype=torch.float64
    )  # ratios far from 1
    ref_table = torch.randn(n_q, n_ans, generator=g, dtype=torch.float64)
    groups = []
    for q in questions:
        probs = torch.softmax(old_table[q], -1)
        answers = torch.multinomial(probs, group, replacement=True, generator=g).tolist()
        # non-binary rewards with a spread, so that advantages of both signs and magnitudes occur
        rewards = [float(a % 4) for a in answers]
        groups.append((q, answers, rewards))
    return table, old_table, ref_table, groups


@pytest.mark.parametrize("aggregation", core.AGGREGATIONS)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_token_level_matches_seed_tabular_step(aggregation, beta):
    table, old_table, ref_table, groups = _tabular_setup()
    clip_eps, G = 0.2, 8

    # the seed: one loss per question, averaged over questions (equal group sizes)
    seed_loss = torch.stack(
        [
            _seed_group_loss(table, old_table, ref_table, q, ans, _seed_group_advantages(r), clip_eps, beta)
            for q, ans, r in groups
        ]
    ).mean()
    (seed_grad,) = torch.autograd.grad(seed_loss, table)

    # token level: B = P * G completions of length T = 1, logits (B, 1, V) looked up in the table
    qs = torch.tensor([q for q, ans, _ in groups for _ in ans])  # (B,)
    index = torch.tensor([a for _, ans, _ in groups for a in ans]).unsqueeze(-1)  # (B, 1)
    rewards = torch.tensor([x for _, _, r in groups for x in r], dtype=torch.float64)  # (B,)
    adv, zero_std = group_advantages(rewards, G, std_correction=0, eps=1e-8)
    assert not zero_std.any()
    logits = table[qs].unsqueeze(1)  # (B, 1, V)
    logp = selective_log_softmax(logits, index)  # (B, 1)
    old_logp = selective_log_softmax(old_table[qs].unsqueeze(1), index)  # (B, 1)
    mask = torch.ones_like(index, dtype=torch.bool)
    per_token, stats = clipped_surrogate(logp, old_logp, adv.float(), mask, epsilon_low=clip_eps)
    if beta:
        per_token = per_token + beta * full_kl(logits, ref_table[qs].unsqueeze(1))
    loss = aggregate_loss(per_token, mask, aggregation, max_completion_length=1)
    (grad,) = torch.autograd.grad(loss, table)

    # the case is clip-active on both sides, with ratios well outside [0.8, 1.2]
    assert stats["low_clipped"].any() and stats["high_clipped"].any() and not stats["clipped"].all()
    assert (stats["ratio"] > 1.2).any() and (stats["ratio"] < 0.8).any()
    assert (adv > 0).any() and (adv < 0).any()
    assert_same_math(loss, seed_loss)
    assert_same_math(grad, seed_grad)


def test_group_advantages_match_seed_numpy_z_score():
    g = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 2, (6 * 8,), generator=g).double()
    rewards[:8] = 1.0  # one all-right group
    adv, zero_std = group_advantages(rewards, 8, std_correction=0, eps=1e-8)
    expected = np.concatenate([_seed_group_advantages(r) for r in rewards.view(6, 8).tolist()])
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-6, atol=0)
    assert zero_std[0] and (adv[:8] == 0).all()


# ---------------------------------------------------------------------------------------------------------------
# KL estimators against the exact KL, by Monte Carlo


def test_k1_k3_unbiased_k2_close_for_nearby():
    g = torch.Generator().manual_seed(0)
    V, n = 13, 200_000
    logits = torch.randn(V, generator=g, dtype=torch.float64)
    for ref_logits, nearby in [
        (torch.randn(V, generator=g, dtype=torch.float64), False),
        (logits + 0.1 * torch.randn(V, generator=g, dtype=torch.float64), True),
    ]:
        exact = full_kl(logits, ref_logits).item()
        samples = torch.multinomial(logits.softmax(-1), n, replacement=True, generator=g)  # (n,) from pi
        logp = torch.log_softmax(logits, -1)[samples].view(1, n)  # (1, n) as a (B, T) batch
        ref_logp = torch.log_softmax(ref_logits, -1)[samples].view(1, n)
        for est in ("k1", "k3"):
            k = kl_estimate(logp, ref_logp, est)
            mean, se = k.mean().item(), (k.std() / math.sqrt(n)).item()
            # unbiased: within 5 standard errors of the exact value (a false alarm ~ 1 in 1.7 million)
            assert abs(mean - exact) < 5 * se, (est, mean, exact, se)
        k2 = kl_estimate(logp, ref_logp, "k2")
        assert (k2 >= 0).all() and (kl_estimate(logp, ref_logp, "k3") >= 0).all()
        if nearby:
            # k2 is biased, but equal to the KL to second order in log r: within 1% (+ noise) when close
            se = (k2.std() / math.sqrt(n)).item()
            assert abs(k2.mean().item() - exact) < 0.01 * exact + 5 * se


def test_kl_estimators_formulas_and_full_rejected():
    logp, ref = torch.tensor([[-1.0, -0.5]]), torch.tensor([[-0.2, -0.5]])
    log_r = ref - logp
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), -log_r)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), log_r**2 / 2)
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), log_r.exp() - log_r - 1)
    with pytest.raises(ValueError, match="full_kl"):
        kl_estimate(logp, ref, "full")
    with pytest.raises(ValueError, match="estimator"):
        kl_estimate(logp, ref, "k4")


# ---------------------------------------------------------------------------------------------------------------
# advantages against plain-Python loops


def _loop_advantages(rewards, G, mode, scale, corr, eps):
    all_valid = [r for r in rewards if not math.isnan(r)]
    out, zero_flags = [], []
    for start in range(0, len(rewards), G):
        group = rewards[start : start + G]
        vals = [r for r in group if not math.isnan(r)]
        zero = len(vals) < 2 or all(v == vals[0] for v in vals)
        zero_flags.append(zero)
        for r in group:
            if math.isnan(r):
                out.append(0.0)
            elif mode == "reinforce":
                out.append(r)
            elif zero:
                out.append(0.0)
            elif mode == "rloo":
                out.append(r - (sum(vals) - r) / (len(vals) - 1))
            else:
                mean = sum(vals) / len(vals)
                if scale == "none":
                    out.append(r - mean)
                elif scale == "group":
                    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - corr))
                    out.append((r - mean) / (std + eps))
                else:
                    bmean = sum(all_valid) / len(all_valid)
                    bstd = math.sqrt(sum((v - bmean) ** 2 for v in all_valid) / (len(all_valid) - corr))
                    out.append((r - mean) / (bstd + eps))
    return out, zero_flags


_ADV_CASES = [("grpo", s, c) for s in core.SCALE_REWARDS for c in (0, 1)] + [
    ("rloo", "group", 1),
    ("reinforce", "group", 1),
]


@pytest.mark.parametrize(("mode", "scale", "corr"), _ADV_CASES)
def test_group_advantages_match_loops(mode, scale, corr):
    rng = np.random.default_rng(3)
    G = 6
    rewards = rng.normal(size=7 * G).round(2).tolist()
    rewards[0:G] = [0.3] * G  # zero variance, where r - mean need not round to 0
    rewards[G : 2 * G] = [float("nan")] * (G - 1) + [1.0]  # one valid sample: no comparison possible
    rewards[2 * G + 1] = rewards[2 * G + 4] = float("nan")  # NaN left out of the statistics
    rewards[3 * G : 4 * G] = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]  # binary, the usual case
    rewards[4 * G : 5 * G] = [float("nan"), 2.0, 2.0, float("nan"), 2.0, 2.0]  # equal valid rewards
    eps = 1e-4
    adv, zero_std = group_advantages(
        torch.tensor(rewards, dtype=torch.float64),
        G,
        mode=mode,
        scale_rewards=scale,
        std_correction=corr,
        eps=eps,
    )
    expected, zero_flags = _loop_advantages(rewards, G, mode, scale, corr, eps)
    assert adv.dtype == torch.float64
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    assert zero_std.tolist() == zero_flags == [True, True, False, False, True, False, False]
    nan = torch.isnan(torch.tensor(rewards))
    assert (adv[nan] == 0).all()  # exactly 0, never NaN
    if mode != "reinforce":
        zeroed = zero_std.repeat_interleave(G)
        assert (adv[zeroed] == 0.0).all()  # set explicitly, not left to rounding


def test_zero_variance_groups_are_exactly_zero():
    G = 8
    # the premise: with 0.3 repeated in float32, naive r - mean is not 0, and neither is the naive z-score
    r = torch.full((G,), 0.3)
    naive = (r - r.mean()) / (r.std(correction=0) + 1e-8)
    assert (naive != 0).any() and naive.abs().max() > 0.5
    for value in (0.3, 0.1, 1 / 3, 0.7):
        for dtype in (torch.float32, torch.float64):
            rewards = torch.full((2 * G,), value, dtype=dtype)
            rewards[G:] = torch.tensor([0.0, 1.0] * (G // 2), dtype=dtype)
            for mode in ("grpo", "rloo"):
                for scale in core.SCALE_REWARDS:
                    for corr, eps in ((1, 1e-4), (0, 1e-8)):
                        adv, zero_std = group_advantages(
                            rewards, G, mode=mode, scale_rewards=scale, std_correction=corr, eps=eps
                        )
                        assert zero_std.tolist() == [True, False]
                        assert adv[:G].tolist() == [0.0] * G
                        assert adv.dtype == dtype and (adv[G:] != 0).all()


@pytest.mark.parametrize("mode", core.GROUP_MODES)
@pytest.mark.parametrize("scale_rewards", core.SCALE_REWARDS)
def test_group_advantages_without_nan_take_the_unmasked_branch_and_equal_the_masked_one(mode, scale_rewards):
    """Rewards without NaN (the usual case) skip the masks; the same groups beside a group of NaN (which sends every
    group through the masked form, and adds nothing to any statistic, the batch std included) give the same advantages
    and zero_std, bit for bit: ties, all-equal groups, binary and continuous rewards, G from 2 to 9, float32 and
    float64, both std conventions."""
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
                for corr, eps in ((1, 1e-4), (0, 1e-8)):
                    kw = dict(mode=mode, scale_rewards=scale_rewards, std_correction=corr, eps=eps)
                    got = group_advantages(r, G, **kw)
                    nan_group = torch.cat([r, torch.full((G,), math.nan, dtype=dtype)])
                    want = group_advantages(nan_group, G, **kw)
                    assert torch.equal(got[0], want[0][: P * G]) and torch.equal(got[1], want[1][:P]), (
                        G,
                        kind,
                    )
                    assert want[1][P] and want[0][P * G :].eq(0).all()  # (the NaN group: no signal, 0)
                    assert got[1][0] and not got[1].all()
                    cases += 1
    assert cases == 72


@pytest.mark.parametrize(
    ("kw", "shortcut"),
    [
        ({}, True),  # GRPO's clip
        ({"epsilon_low": 0.0, "epsilon_high": 0.0}, True),  # r == 1 sits on both clip edges
        ({"epsilon_high": 0.28, "delta": 1.5}, True),  # clip-higher, two-sided
        ({"delta": 0.5}, False),  # delta below 1 binds even at r == 1
        ({"importance_sampling_level": "sequence"}, False),  # GSPO: a row's ratio spreads over its tokens
    ],
)
def test_on_policy_surrogate_equals_the_clip_with_old_logp_detached(kw, shortcut):
    """old_logp None (on-policy: the trainer's num_iterations 1, one mini-batch) against old_logp = logp.detach(),
    which always takes the clip's general form: the same per-token loss, statistics and gradient, bit for bit."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(5, 4, generator=g, dtype=torch.float64)
    adv = torch.randn(5, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 4, generator=g) < 0.7
    results = []
    for old in (None, "detached"):
        logp = base.clone().requires_grad_(True)
        loss, stats = clipped_surrogate(logp, None if old is None else logp.detach(), adv, mask, **kw)
        if old is None:  # the on-policy shortcut is -(r * A), no min and no expand: taken where it should be
            assert (type(loss.grad_fn).__name__ == "NegBackward0") is shortcut
        (grad,) = torch.autograd.grad((loss * mask).sum(), logp)
        results.append((loss.detach(), stats, grad))
    (loss_a, st_a, grad_a), (loss_b, st_b, grad_b) = results
    assert torch.equal(loss_a, loss_b) and torch.equal(grad_a, grad_b) and grad_a.abs().sum() > 0
    for key in ("ratio", "low_clipped", "high_clipped", "clipped"):
        assert torch.equal(st_a[key].expand_as(mask), st_b[key].expand_as(mask)), key


def test_group_advantages_validation():
    r = torch.zeros(8)
    with pytest.raises(ValueError, match="mode"):
        group_advantages(r, 4, mode="ppo")
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(r, 4, scale_rewards="global")
    with pytest.raises(ValueError, match="num_generations=3"):
        group_advantages(r, 3)
    with pytest.raises(ValueError, match="num_generations"):
        group_advantages(r, 1)
    with pytest.raises(ValueError, match="std_correction"):
        group_advantages(r, 4, std_correction=2)
    adv, _ = group_advantages(torch.tensor([1, 0, 1, 1]), 2)  # integer rewards are promoted
    assert adv.is_floating_point()


# ---------------------------------------------------------------------------------------------------------------
# aggregation against loops


def _ragged_batch(seed=0, B=5, T=6):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(B, T, generator=g, dtype=torch.float64)
    lengths = [3, 6, 0, 1, 4][:B]  # ragged, with an all-masked row
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True
    loss[~mask] = 1e6  # garbage at masked positions must not leak
    return loss, mask, lengths


def test_aggregate_loss_matches_loops():
    loss, mask, lengths = _ragged_batch()
    B, T = loss.shape
    rows = [[loss[b, t].item() for t in range(n)] for b, n in enumerate(lengths)]
    total = sum(sum(r) for r in rows)
    n_tokens = sum(lengths)
    expected = {
        "grpo": sum(sum(r) / len(r) if r else 0.0 for r in rows) / B,
        "bnpo": total / n_tokens,
        "dr_grpo": total / (B * 8),
        "dapo": total / 40.0,
        "luspo": total / B,  # each row's token SUM, averaged over rows
    }
    assert set(expected) == set(core.AGGREGATIONS)
    for agg in core.AGGREGATIONS:
        got = aggregate_loss(loss, mask, agg, max_completion_length=8, num_items_in_batch=40.0)
        assert got.shape == ()
        assert math.isclose(got.item(), expected[agg], rel_tol=1e-12), agg
    # every loss type reduces by the aggregation it is registered with, as TRL pairs them (GMPO: a per-sequence
    # loss averaged over sequences)
    pairs = {"cispo": "dapo", "vespo": "dapo", "sapo": "grpo", "gmpo": "grpo"} | {
        a: a for a in core.AGGREGATIONS
    }
    assert {name: spec.aggregation for name, spec in POLICY_LOSSES.items()} == pairs
    # dapo's default is the local token count; a tensor count works too
    assert math.isclose(aggregate_loss(loss, mask, "dapo").item(), expected["bnpo"], rel_tol=1e-12)
    got = aggregate_loss(loss, mask, "dapo", num_items_in_batch=torch.tensor(40.0))
    assert math.isclose(got.item(), expected["dapo"], rel_tol=1e-12)
    assert math.isclose(masked_mean(loss, mask).item(), total / n_tokens, rel_tol=1e-12)


def test_aggregate_loss_empty_and_validation():
    loss = torch.randn(2, 3)
    empty = torch.zeros(2, 3, dtype=torch.bool)
    for agg in core.AGGREGATIONS:
        assert aggregate_loss(loss, empty, agg, max_completion_length=3).item() == 0.0
    assert masked_mean(loss, empty).item() == 0.0
    with pytest.raises(ValueError, match="aggregation"):
        aggregate_loss(loss, empty, "sum")
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate_loss(loss, empty, "dr_grpo")
    with pytest.raises(ValueError, match="num_items_in_batch"):
        aggregate_loss(loss, empty, "dapo", num_items_in_batch=0)


# ---------------------------------------------------------------------------------------------------------------
# the clipped surrogate


def test_clip_gradient_zero_exactly_where_clip_binds():
    g = torch.Generator().manual_seed(0)
    B, T = 64, 5
    old = torch.randn(B, T, generator=g, dtype=torch.float64)
    log_ratio = torch.empty(B, T, dtype=torch.float64).uniform_(-0.6, 0.6, generator=g)
    logp = (old + log_ratio).requires_grad_()
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    eps_low, eps_high = 0.2, 0.28
    per_token, stats = clipped_surrogate(logp, old, adv, mask, epsilon_low=eps_low, epsilon_high=eps_high)
    (grad,) = torch.autograd.grad(per_token.sum(), logp)

    # independent: where the objective would improve past the clip, the clip binds
    r = torch.exp(log_ratio)
    A = adv.unsqueeze(-1).expand(B, T)
    binds = ((r > 1 + eps_high) & (A > 0)) | ((r < 1 - eps_low) & (A < 0))
    assert binds.any() and (~binds).any()
    assert (grad[binds] == 0).all()
    assert (grad[~binds] != 0).all()
    torch.testing.assert_close(grad[~binds], (-r * A)[~binds])  # d(-r A)/d logp = -r A
    assert torch.equal(stats["clipped"], binds)
    torch.testing.assert_close(stats["ratio"], r)
    # loss value: elementwise formula
    expected = -torch.minimum(r * A, r.clamp(1 - eps_low, 1 + eps_high) * A)
    torch.testing.assert_close(per_token, expected)


def test_sequence_level_equals_token_level_for_one_token():
    g = torch.Generator().manual_seed(1)
    logp, old = torch.randn(6, 1, generator=g), torch.randn(6, 1, generator=g)
    adv, mask = torch.randn(6, generator=g), torch.ones(6, 1, dtype=torch.bool)
    tok, tok_stats = clipped_surrogate(logp, old, adv, mask)
    seq, seq_stats = clipped_surrogate(logp, old, adv, mask, importance_sampling_level="sequence")
    torch.testing.assert_close(seq, tok)
    assert torch.equal(seq_stats["clipped"], tok_stats["clipped"])


def test_sequence_ratio_is_length_normalised_masked_mean():
    g = torch.Generator().manual_seed(2)
    loss_garbage, mask, lengths = _ragged_batch(seed=2)
    logp = torch.randn(mask.shape, generator=g, dtype=torch.float64) * 0.2
    old = torch.randn(mask.shape, generator=g, dtype=torch.float64) * 0.2
    old[~mask] = float("nan")  # masked positions may hold anything
    adv = torch.randn(mask.shape[0], generator=g, dtype=torch.float64)
    per_token, stats = clipped_surrogate(logp, old, adv, mask, importance_sampling_level="sequence")
    for b, n in enumerate(lengths):
        s = sum(logp[b, t].item() - old[b, t].item() for t in range(n)) / max(1, n)
        r = math.exp(s)
        expected = -min(r * adv[b].item(), min(max(r, 0.8), 1.2) * adv[b].item())
        assert torch.allclose(stats["ratio"][b], torch.tensor(r, dtype=torch.float64))
        assert torch.allclose(per_token[b], torch.tensor(expected, dtype=torch.float64))


def test_delta_clamps_the_unclipped_ratio():
    old = torch.zeros(4, 1)
    logp = torch.log(torch.tensor([[5.0], [5.0], [0.5], [1.1]]))  # ratios 5, 5, 0.5, 1.1
    adv = torch.tensor([-1.0, 1.0, -1.0, -1.0])
    mask = torch.ones(4, 1, dtype=torch.bool)
    plain, _ = clipped_surrogate(logp, old, adv, mask)
    two_sided, _ = clipped_surrogate(logp, old, adv, mask, delta=3.0)
    # A < 0, r = 5: plain GRPO's loss is -(r A) = 5, unbounded; delta caps the ratio at 3
    torch.testing.assert_close(plain[:, 0], torch.tensor([5.0, -1.2, 0.8, 1.1]))
    torch.testing.assert_close(two_sided[:, 0], torch.tensor([3.0, -1.2, 0.8, 1.1]))
    with pytest.raises(ValueError, match="delta"):
        clipped_surrogate(logp, old, adv, mask, delta=0.0)
    with pytest.raises(ValueError, match="importance_sampling_level"):
        clipped_surrogate(logp, old, adv, mask, importance_sampling_level="sequence_token")


# ---------------------------------------------------------------------------------------------------------------
# log-probs, entropy, full KL


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_selective_log_softmax_matches_log_softmax_gather(temperature):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 11, generator=g) * 3
    index = torch.randint(0, 11, (3, 7), generator=g)
    expected = torch.log_softmax(logits / temperature, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(selective_log_softmax(logits, index, temperature), expected)
    low = selective_log_softmax(logits.bfloat16(), index, temperature)  # float32 rows, bf16 input rounding
    expected_low = torch.log_softmax(logits.bfloat16().float() / temperature, -1).gather(
        -1, index.unsqueeze(-1)
    )
    torch.testing.assert_close(low, expected_low.squeeze(-1), rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError, match="temperature"):
        selective_log_softmax(logits, index, 0.0)
    with pytest.raises(ValueError, match="index"):
        selective_log_softmax(logits, index[:, :3])


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_entropy_and_full_kl_against_direct_formulas(temperature):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 5, 9, generator=g, dtype=torch.float64)
    ref = torch.randn(4, 5, 9, generator=g, dtype=torch.float64)
    p = torch.softmax(logits / temperature, -1)
    q = torch.softmax(ref / temperature, -1)
    torch.testing.assert_close(entropy_from_logits(logits, temperature), -(p * p.log()).sum(-1))
    torch.testing.assert_close(full_kl(logits, ref, temperature), (p * (p.log() - q.log())).sum(-1))
    torch_kl = kl_divergence(Categorical(logits=logits / temperature), Categorical(logits=ref / temperature))
    torch.testing.assert_close(full_kl(logits, ref, temperature), torch_kl)
    assert (full_kl(logits, logits) == 0).all()
