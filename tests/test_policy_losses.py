"""The policy-loss variants (tinygrpo.algorithm.policy_losses, grpo_loss's options) against independent transcriptions.

Each oracle is a plain-Python loop over elements with Python floats, written from the definitions (TRL 1.16's
_compute_loss / get_off_policy_mask / get_gamma_weights / get_high_entropy_mask, verl's geo_mean loss), with the
gradient w.r.t. log pi (or the logits) derived by hand, not by autograd. Nothing here calls the helpers the library
builds them from.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from _runs import reference_trainer, run_inproc
from safetensors.torch import load_file

from tinygrpo.algorithm.core import aggregate_loss, entropy_threshold, high_entropy_mask, off_policy_mask
from tinygrpo.algorithm.policy_losses import (
    POLICY_LOSSES,
    LossConfig,
    cispo_surrogate,
    gmpo_surrogate,
    register_policy_loss,
    sapo_surrogate,
    vespo_surrogate,
)
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.round import Batch
from tinygrpo.run.config import ConfigError, GRPOConfig
from tinygrpo.run.logs import TIMING_PREFIXES, read_jsonl
from tinygrpo.update.loss import EntropyCoefficient, LossInputs, grpo_loss

F64 = {"rtol": 1e-12, "atol": 1e-12}
LENGTHS = [5, 3, 1, 4, 2, 5, 3]  # ragged rows of a (7, 5) batch


def _case(seed=0, spread=0.6):
    """logp, old_logp, advantages (both signs, one exactly 0), mask; log ratios in [-spread, spread] on the
    completion tokens and large garbage on padding (which must not leak into any sequence statistic)."""
    g = torch.Generator().manual_seed(seed)
    B, T = len(LENGTHS), 5
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = True
    old = -1.0 - torch.rand(B, T, generator=g, dtype=torch.float64)
    log_ratio = torch.empty(B, T, dtype=torch.float64).uniform_(-spread, spread, generator=g)
    log_ratio[~mask] = 7.0
    adv = torch.tensor([1.3, -0.7, 0.4, -1.5, 0.0, 0.9, -0.25], dtype=torch.float64)
    return (old + log_ratio).requires_grad_(), old, adv, mask


def _lists(*xs):
    return [x.detach().tolist() for x in xs]


def _masked_grad(per_token, logp, mask):
    (grad,) = torch.autograd.grad((per_token * mask).sum(), logp)
    return grad


def _assert_on_mask(got, expected, mask):
    exp = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(got.detach()[mask], exp[mask], **F64)


def _seq_log_ratio(lp, old, mask, b):
    toks = [lp[b][t] - old[b][t] for t in range(len(lp[b])) if mask[b][t]]
    return sum(toks) / max(1, len(toks))


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------------------------------------------------------
# the surrogates, element by element


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_cispo_matches_loop(level):
    logp, old, adv, mask = _case(1)
    eps = 1.15 if level == "token" else 0.9  # the cap of the weight itself
    per_token, stats = cispo_surrogate(
        logp, old, adv, mask, epsilon_high=eps, importance_sampling_level=level
    )
    grad = _masked_grad(per_token, logp, mask)
    lp, ol, A, m = _lists(logp, old, adv, mask)
    value, dvalue, capped = [], [], []
    for b in range(len(lp)):
        row_v, row_g, row_c = [], [], []
        for t in range(len(lp[b])):
            lr = lp[b][t] - ol[b][t] if level == "token" else _seq_log_ratio(lp, ol, m, b)
            w = min(math.exp(lr), eps)  # truncated, and a constant for the gradient
            row_v.append(-w * A[b] * lp[b][t])
            row_g.append(-w * A[b] if m[b][t] else 0.0)
            row_c.append(math.exp(lr) > eps and A[b] > 0)  # capped, positive advantage (TRL's statistic)
        value.append(row_v)
        dvalue.append(row_g)
        capped.append(row_c)
    _assert_on_mask(per_token, value, mask)
    torch.testing.assert_close(grad, torch.tensor(dvalue, dtype=torch.float64), **F64)
    assert torch.equal(stats["high_clipped"][mask], torch.tensor(capped)[mask])
    assert stats["high_clipped"][mask].any() and not stats["high_clipped"][mask].all()


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_sapo_matches_loop(level):
    logp, old, adv, mask = _case(2, spread=1.5)  # far beyond any clip range: the gate decays smoothly
    tp, tn = 1.0, 1.75  # exact in float32 too (see test_sapo_and_vespo_parameters_keep_float64_precision)
    per_token, _ = sapo_surrogate(
        logp, old, adv, mask, temperature_pos=tp, temperature_neg=tn, importance_sampling_level=level
    )
    grad = _masked_grad(per_token, logp, mask)
    lp, ol, A, m = _lists(logp, old, adv, mask)
    value, dvalue = [], []
    for b in range(len(lp)):
        tau = tp if A[b] > 0 else tn
        row_v, row_g = [], []
        for t in range(len(lp[b])):
            lr = lp[b][t] - ol[b][t] if level == "token" else _seq_log_ratio(lp, ol, m, b)
            r = math.exp(lr)
            s = _sigmoid(tau * (r - 1))
            row_v.append(-s * 4 / tau * A[b])
            # d/dlogp of -4/tau sigmoid(tau (r - 1)) A = -4 s (1 - s) r A. Sequence level: r_b = exp(mean log
            # ratio) moves by r_b / n per token, and the row's n tokens each carry the row's loss.
            row_g.append(-4 * s * (1 - s) * r * A[b] if m[b][t] else 0.0)
        value.append(row_v)
        dvalue.append(row_g)
    _assert_on_mask(per_token, value, mask)
    torch.testing.assert_close(grad, torch.tensor(dvalue, dtype=torch.float64), **F64)


def _vespo_phi(log_ratios, A, kp=2.0, lp_=3.0, kn=3.0, ln=2.0):
    """phi(w) = e^lam * w^k * e^(-lam w) (closed form, not in log space), w = prod_t r_t with TRL's clamps."""
    s = sum(min(max(x, -20.0), 20.0) for x in log_ratios)
    w = math.exp(min(max(s, math.log(1e-8)), 20.0))
    k, lam = (kp, lp_) if A >= 0 else (kn, ln)
    return math.exp(lam) * w**k * math.exp(-lam * w)


def test_vespo_matches_closed_form_and_clamps():
    logp, old, adv, mask = _case(3, spread=0.5)
    with torch.no_grad():  # extreme ratios: per-token clamp at -20, and the sequence clamp at log(1e-8)
        logp[1, 0] = old[1, 0] - 25.0  # row 1: sum of clamped log ratios ~ -20 + 2 tokens of |x| <= 0.5
        logp[3, :2] = old[3, :2] + torch.tensor([-30.0, 14.0], dtype=torch.float64)  # -20 + 14: inside
    per_token, stats = vespo_surrogate(logp, old, adv, mask)
    grad = _masked_grad(per_token, logp, mask)
    lp, ol, A, m = _lists(logp, old, adv, mask)
    value, dvalue, phis = [], [], []
    for b in range(len(lp)):
        phi = _vespo_phi([lp[b][t] - ol[b][t] for t in range(len(lp[b])) if m[b][t]], A[b])
        phis.append(phi)
        value.append([-phi * A[b] * x for x in lp[b]])
        dvalue.append([-phi * A[b] if m[b][t] else 0.0 for t in range(len(lp[b]))])
    _assert_on_mask(per_token, value, mask)
    torch.testing.assert_close(grad, torch.tensor(dvalue, dtype=torch.float64), rtol=1e-10, atol=1e-300)
    torch.testing.assert_close(
        stats["ratio"][:, 0], torch.tensor(phis, dtype=torch.float64), rtol=1e-10, atol=0
    )
    # the clamps acted: row 1's sum of log ratios is below log(1e-8) (the sequence clamp), row 3 has a token at
    # -30 (the per-token clamp at -20); without the clamps their weights would be orders of magnitude smaller
    for b, (raw, k, lam) in {1: (-25.0, 3.0, 2.0), 3: (-16.0, 3.0, 2.0)}.items():
        raw += sum(lp[b][t] - ol[b][t] for t in range(len(lp[b])) if m[b][t] and abs(lp[b][t] - ol[b][t]) < 1)
        unclamped = math.exp(lam + k * raw - lam * math.exp(raw))
        assert phis[b] > 1e3 * unclamped > 0
    # phi(1) = 1 (w = 1 whatever k and lambda): on-policy weights are exactly 1
    _, st = vespo_surrogate(
        logp, logp.detach(), adv, mask, k_pos=5.0, lambda_pos=0.5, k_neg=0.0, lambda_neg=9.0
    )
    assert torch.equal(st["ratio"], torch.ones_like(st["ratio"]))


def test_gmpo_matches_loop_and_zeroes_pessimistically_clipped_tokens():
    logp, old, adv, mask = _case(4)
    el, eh = 0.2, 0.3
    per_token, stats = gmpo_surrogate(logp, old, adv, mask, epsilon_low=el, epsilon_high=eh)
    loss = aggregate_loss(per_token, mask, POLICY_LOSSES["gmpo"].aggregation)
    (grad,) = torch.autograd.grad(loss, logp)
    lp, ol, A, m = _lists(logp, old, adv, mask)
    B = len(lp)
    seq_losses, dvalue, clipped = [], [], []
    for b in range(B):
        toks = [t for t in range(len(lp[b])) if m[b][t]]
        lrs = {t: lp[b][t] - ol[b][t] for t in toks}
        # the pessimistic clip in log space: A > 0 keeps min(lr, eps_high), A < 0 keeps max(lr, -eps_low)
        if A[b] > 0:
            kept = {t: min(x, eh) for t, x in lrs.items()}
            cut = {t: x > eh for t, x in lrs.items()}
        elif A[b] < 0:
            kept = {t: max(x, -el) for t, x in lrs.items()}
            cut = {t: x < -el for t, x in lrs.items()}
        else:  # sign(0) = 0: the row's loss is 0 * ratio
            kept = {t: 0.0 for t in toks}
            cut = {t: False for t in toks}
        geo = math.exp(sum(kept.values()) / len(toks))  # the geometric mean of the clipped token ratios
        seq_losses.append(-A[b] * geo)
        # d(-A geo)/d logp_t = -A geo / n for an unclipped token, 0 for a clipped one; the batch mean adds 1 / B
        dvalue.append(
            [-A[b] * geo / len(toks) / B if t in toks and not cut[t] else 0.0 for t in range(len(lp[b]))]
        )
        clipped.append([cut.get(t, False) for t in range(len(lp[b]))])
    _assert_on_mask(per_token, [[v] * len(lp[0]) for v in seq_losses], mask)
    torch.testing.assert_close(loss, torch.tensor(sum(seq_losses) / B, dtype=torch.float64), **F64)
    torch.testing.assert_close(grad, torch.tensor(dvalue, dtype=torch.float64), **F64)
    cut = torch.tensor(clipped)
    assert cut.any() and (~cut & mask).any() and (adv[:, None] * ~cut * mask != 0).any()
    assert (grad[cut] == 0).all()  # exactly zero, not small
    assert torch.equal(stats["clipped"] & mask, cut)


# ---------------------------------------------------------------------------------------------------------------
# on-policy: every surrogate is a multiple of the plain policy gradient


def _plain_pg_grad(adv, mask, agg):
    """The gradient w.r.t. log pi of -A log pi aggregated by `agg`, by hand: -A_b times the token's weight."""
    A, m = adv.tolist(), mask.tolist()
    B, n_tokens = len(m), sum(map(sum, m))
    weight = {
        "grpo": lambda b: 1 / (B * sum(m[b])),  # the row's token mean, then the mean over rows
        "bnpo": lambda b: 1 / n_tokens,  # (dapo without a global count too)
        "luspo": lambda b: 1 / B,  # the row's token sum, then the mean over rows
    }[agg]
    return torch.tensor([[-A[b] * weight(b) * x for x in m[b]] for b in range(B)], dtype=torch.float64)


ON_POLICY = [  # (surrogate, keywords, its aggregation, the multiple of the policy gradient)
    (cispo_surrogate, {"epsilon_high": 0.6}, "bnpo", 0.6),  # min(1, eps_high)
    (cispo_surrogate, {"epsilon_high": 5.0}, "bnpo", 1.0),
    (cispo_surrogate, {"epsilon_high": 0.6, "importance_sampling_level": "sequence"}, "bnpo", 0.6),
    (sapo_surrogate, {"temperature_pos": 0.7, "temperature_neg": 2.0}, "grpo", 1.0),
    (sapo_surrogate, {"temperature_neg": 3.0, "importance_sampling_level": "sequence"}, "grpo", 1.0),
    (vespo_surrogate, {"k_pos": 4.0, "lambda_neg": 0.3}, "bnpo", 1.0),
    (gmpo_surrogate, {"epsilon_low": 0.1}, "grpo", 1.0),
]


@pytest.mark.parametrize(("fn", "kw", "agg", "multiple"), ON_POLICY)
def test_on_policy_gradient_is_a_multiple_of_the_policy_gradient(fn, kw, agg, multiple):
    """old_logp None: r is exactly 1, and the aggregated loss's gradient is `multiple` x that of -A log pi. gmpo's
    row loss -A exp(mean_t (logp - sg logp)) has the gradient -A grad(mean_t logp): -A / n_b per token, which is
    the "grpo" aggregation (the row's token mean) of -A log pi; a sequence-level ratio's gradient 1 / n_b per token,
    summed over the row's n_b tokens, is the token level's. All but gmpo (a row loss) under every aggregation."""
    logp, _, adv, mask = _case(5)
    per_token, _ = fn(logp, None, adv, mask, **kw)
    for a in (agg, "luspo", "bnpo", "grpo") if fn is not gmpo_surrogate else (agg,):
        (grad,) = torch.autograd.grad(aggregate_loss(per_token, mask, a), logp, retain_graph=True)
        torch.testing.assert_close(grad, multiple * _plain_pg_grad(adv, mask, a), **F64)
        assert grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------------------------------
# the tabular bandit: one-token answers, logits = a table's rows


def _log_softmax_row(row):
    mx = max(row)
    lse = mx + math.log(sum(math.exp(x - mx) for x in row))
    return [x - lse for x in row]


def _tabular_dloss_dlogp(loss_type, lp, olp, A, cfg):
    """(loss, dloss/dlogp) of ONE one-token sample, from the variants' definitions."""
    lr = lp - olp
    r = math.exp(lr)
    if loss_type == "cispo":
        w = min(r, cfg.epsilon_high)
        return -w * A * lp, -w * A
    if loss_type == "sapo":
        tau = cfg.sapo_temperature_pos if A > 0 else cfg.sapo_temperature_neg
        s = _sigmoid(tau * (r - 1))
        return -s * 4 / tau * A, -4 * s * (1 - s) * r * A
    if loss_type == "vespo":
        phi = _vespo_phi(
            [lr], A, cfg.vespo_k_pos, cfg.vespo_lambda_pos, cfg.vespo_k_neg, cfg.vespo_lambda_neg
        )
        return -phi * A * lp, -phi * A
    if loss_type == "gmpo":
        el, eh = cfg.epsilon, cfg.epsilon_high
        kept = min(lr, eh) if A > 0 else max(lr, -el) if A < 0 else 0.0
        free = A != 0 and kept == lr
        return -A * math.exp(kept), -A * r if free else 0.0
    # luspo: PPO's clip
    lo, hi = 1 - cfg.epsilon, 1 + cfg.epsilon_high
    v = -min(r * A, min(max(r, lo), hi) * A)
    return v, -r * A if v == -r * A else 0.0


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "vespo", "gmpo", "luspo"])
def test_token_level_matches_tabular_bandit(loss_type):
    g = torch.Generator().manual_seed(0)
    n_q, n_ans, G = 5, 13, 8
    table = torch.randn(n_q, n_ans, generator=g, dtype=torch.float64).requires_grad_()
    old_table = table.detach() + 0.6 * torch.randn(n_q, n_ans, generator=g, dtype=torch.float64)
    qs_used = [0, 3, 4]
    qs, answers, advs = [], [], []
    for q in qs_used:
        ans = torch.multinomial(torch.softmax(old_table[q], -1), G, replacement=True, generator=g).tolist()
        rewards = [float(a % 4) for a in ans]
        mean = sum(rewards) / G
        std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / (G - 1))
        qs += [q] * G
        answers += ans
        advs += [(x - mean) / (std + 1e-4) for x in rewards]
    eps_high = 1.3 if loss_type == "cispo" else 0.28  # cispo: the cap of the weight itself
    cfg = GRPOConfig(loss_type=loss_type, epsilon=0.2, epsilon_high=eps_high, sapo_temperature_neg=1.5)
    B = len(qs)
    qs_t, ids = torch.tensor(qs), torch.tensor(answers).unsqueeze(-1)
    batch = Batch(
        torch.zeros(len(qs_used), 1, dtype=torch.long),
        torch.ones(len(qs_used), 1, dtype=torch.long),
        ids,
        torch.ones(B, 1, dtype=torch.float64),
        torch.tensor(advs, dtype=torch.float64),
        torch.zeros(B, dtype=torch.float64),
    )
    old_logps = torch.log_softmax(old_table[qs_t], -1).gather(-1, ids)
    inputs = LossInputs(batch, rows=B, tokens=torch.tensor(float(B)), old_logps=old_logps)
    loss, _ = grpo_loss(table[qs_t].unsqueeze(1), inputs, LossConfig.of(cfg), SamplingParams.of(cfg))
    (grad,) = torch.autograd.grad(loss, table)

    # the transcription, on the table: every aggregation of one-token rows is the mean over the B samples
    T, OT = table.detach().tolist(), old_table.tolist()
    expected_grad = [[0.0] * n_ans for _ in range(n_q)]
    total, ratios = 0.0, []
    for q, a, A in zip(qs, answers, advs, strict=True):
        logp_row, old_row = _log_softmax_row(T[q]), _log_softmax_row(OT[q])
        v, d = _tabular_dloss_dlogp(loss_type, logp_row[a], old_row[a], A, cfg)
        ratios.append(math.exp(logp_row[a] - old_row[a]))
        total += v / B
        for j in range(n_ans):  # d log pi(a) / d table[q, j] = [j == a] - pi(j)
            expected_grad[q][j] += d / B * ((j == a) - math.exp(logp_row[j]))
    assert min(ratios) < 0.75 and max(ratios) > 1.35  # outside every clip range used here, on both sides
    torch.testing.assert_close(loss, torch.tensor(total, dtype=torch.float64), **F64)
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=torch.float64), **F64)


# ---------------------------------------------------------------------------------------------------------------
# masks


def test_off_policy_mask_matches_loop():
    logp, old, adv, mask = _case(6, spread=0.3)
    with torch.no_grad():
        logp[1, :3] -= 0.9  # A < 0, mean k1 > 0.5: dropped
        logp[0, :] -= 0.9  # A > 0: kept whatever the KL
        logp[4, :] -= 0.9  # A == 0: kept
    thr = 0.5
    got = off_policy_mask(adv, logp, old, mask, thr)
    lp, ol, A, m = _lists(logp, old, adv, mask)
    expected = []
    for b in range(len(lp)):
        toks = [ol[b][t] - lp[b][t] for t in range(len(lp[b])) if m[b][t]]
        mean_kl = sum(toks) / max(1, len(toks))
        expected.append([1.0 if A[b] >= 0 or mean_kl <= thr else 0.0])
    assert got.shape == (len(lp), 1) and got.dtype == logp.dtype
    assert got.tolist() == expected
    assert expected[1] == [0.0] and expected[0] == expected[4] == [1.0]
    assert off_policy_mask(adv, logp, None, mask, 1e-9).tolist() == [[1.0]] * len(lp)


def _quantile(xs, q):
    """torch.quantile's default ('linear') by hand: sort, interpolate between the two order statistics."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


@pytest.mark.parametrize("rho", [0.0, 0.2, 0.37, 0.5, 1.0])
def test_entropy_threshold_and_high_entropy_mask_match_sort_and_interpolate(rho):
    g = torch.Generator().manual_seed(7)
    entropies = torch.rand(7, 5, generator=g) * 2.5  # float32, as the trainer's
    _, _, _, mask = _case()
    ent, m = entropies.tolist(), mask.tolist()
    pool = [ent[b][t] for b in range(7) for t in range(5) if m[b][t]]
    thr = _quantile(pool, 1.0 - rho)
    got = entropy_threshold(entropies[mask], rho)
    assert math.isclose(got.item(), thr, rel_tol=1e-6)
    keep = high_entropy_mask(entropies, mask, got)
    expected = [[m[b][t] and ent[b][t] >= thr for t in range(5)] for b in range(7)]
    assert keep.tolist() == expected
    n = sum(map(sum, expected))
    assert 0 < n <= len(pool)
    assert n == 1 if rho == 0 else n == len(pool) if rho == 1 else True  # (the pool's values are distinct)
    assert entropy_threshold(torch.zeros(0), rho).item() == math.inf


def test_entropy_threshold_keeps_the_top_token_of_float64_entropies():
    """FAILS (library bug): entropy_threshold computes the quantile in float32 (`entropies.float()`) and casts it
    back, so for float64 entropies a threshold that is one of the values (rho = 0: the maximum; rho = 1: the
    minimum) is rounded, and can land above that value: rho = 0 then keeps NO token instead of the highest-entropy
    one (the config's help: "0.0 keeps only the highest-entropy ones"), rho = 1 drops the lowest-entropy token.
    float32 entropies (the trainer's) are unaffected. 0.1 and 1.1 both round UP to float32."""
    e = torch.tensor([0.1, 0.3, 0.7, 1.1], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    top = high_entropy_mask(e.view(1, 4), mask, entropy_threshold(e, 0.0))
    every = high_entropy_mask(e.view(1, 4), mask, entropy_threshold(e, 1.0))
    assert (top.tolist(), every.tolist()) == ([[False, False, False, True]], [[True] * 4])
    assert math.isclose(entropy_threshold(e, 0.5).item(), _quantile(e.tolist(), 0.5), rel_tol=1e-15)


def test_sapo_and_vespo_parameters_keep_float64_precision():
    """FAILS (library bug, precision): sapo_surrogate's tau and vespo_weights' k and lambda are built with
    torch.where(cond, python_float, python_float), which makes a tensor of the DEFAULT dtype (float32) before
    `.to(logp.dtype)`: on float64 inputs the default sapo_temperature_neg 1.05 is used as 1.0499999523, and a
    vespo lambda of 0.3 as 0.30000001192, a relative error of ~5e-8 in the loss and gradient instead of ~1e-16.
    (TRL builds its temperatures the same way; in float32 training it makes no difference.)"""
    logp, old, adv, mask = _case(8)
    per_token, _ = sapo_surrogate(logp, old, adv, mask)  # defaults: temperature_pos 1.0, temperature_neg 1.05
    _, st = vespo_surrogate(logp, old, adv, mask, lambda_pos=0.3, k_pos=1.1)
    lp, ol, A, m = _lists(logp, old, adv, mask)
    errors = {}
    for b, t in [(1, 0), (3, 2)]:  # A < 0: tau = 1.05
        r = math.exp(lp[b][t] - ol[b][t])
        expected = -_sigmoid(1.05 * (r - 1)) * 4 / 1.05 * A[b]
        errors[f"sapo[{b},{t}]"] = abs(per_token[b, t].item() / expected - 1)
    for b in (0, 2, 5):  # A > 0: (k, lambda) = (1.1, 0.3)
        lrs = [lp[b][t] - ol[b][t] for t in range(len(lp[b])) if m[b][t]]
        errors[f"vespo phi[{b}]"] = abs(st["ratio"][b, 0].item() / _vespo_phi(lrs, A[b], 1.1, 0.3) - 1)
    assert all(e < 1e-13 for e in errors.values()), errors


# ---------------------------------------------------------------------------------------------------------------
# grpo_loss's options, from logits: gradients w.r.t. the logits by the chain rule, by hand

LOGIT_LENGTHS = [4, 2, 1, 3, 4, 2]  # 3 groups of 2; 16 tokens (an even count: no quantile lands on a value)


def _logits_case(seed=0, V=5):
    g = torch.Generator().manual_seed(seed)
    B, T = len(LOGIT_LENGTHS), max(LOGIT_LENGTHS)
    logits = (1.5 * torch.randn(B, T, V, generator=g, dtype=torch.float64)).requires_grad_()
    ids = torch.randint(0, V, (B, T), generator=g)
    mask = torch.zeros(B, T, dtype=torch.float64)
    for b, n in enumerate(LOGIT_LENGTHS):
        mask[b, :n] = 1.0
    adv = torch.tensor([0.8, -0.8, 1.1, -0.4, -0.3, 0.0], dtype=torch.float64)
    batch = Batch(
        torch.zeros(3, 1, dtype=torch.long), torch.ones(3, 1, dtype=torch.long), ids, mask, adv, adv
    )
    return logits, batch


def _token_table(logits, batch):
    """Per completion token (b, t): (p, y, log p(y), H) in Python floats, from the logits' own definition."""
    out = {}
    L, ids = logits.detach().tolist(), batch.completion_ids.tolist()
    for b, n in enumerate(LOGIT_LENGTHS):
        for t in range(n):
            z = L[b][t]
            mx = max(z)
            e = [math.exp(x - mx) for x in z]
            p = [x / sum(e) for x in e]
            y = ids[b][t]
            out[b, t] = (p, y, math.log(p[y]), -sum(q * math.log(q) for q in p))
    return out


def _chain(logits, dlogp=None, dentropy=None, table=None):
    """Gradient w.r.t. the logits of sum_bt dlogp[b,t] * log p(y_bt) + dentropy[b,t] * H_bt:
    d log p(y) / dz_j = [j == y] - p_j, dH / dz_j = -p_j (log p_j + H)."""
    grad = [[[0.0] * logits.shape[2] for _ in range(logits.shape[1])] for _ in range(logits.shape[0])]
    for (b, t), (p, y, _, H) in table.items():
        for j, pj in enumerate(p):
            grad[b][t][j] += (dlogp or {}).get((b, t), 0.0) * ((j == y) - pj)
            grad[b][t][j] += (dentropy or {}).get((b, t), 0.0) * -pj * (math.log(pj) + H)
    return torch.tensor(grad, dtype=torch.float64)


def _run_loss(logits, batch, cfg, old_logps=None, ref_logps=None, **kw):
    inputs = LossInputs(
        batch,
        rows=batch.completion_ids.size(0),
        tokens=batch.completion_mask.sum(),
        old_logps=old_logps,
        ref_logps=ref_logps,
    )
    loss, stats = grpo_loss(logits, inputs, LossConfig.of(cfg), SamplingParams.of(cfg), **kw)
    (grad,) = torch.autograd.grad(loss, logits)
    return loss, grad, stats


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_luspo_sums_each_rows_tokens_and_averages_over_the_whole_mini_batch(level):
    """ "luspo" on-policy: the loss is sum_b sum_t -A_b / rows, rows counting the mini-batch's skipped groups too
    (here one group of 2 left out of the forward), so the gradient is -A_b / rows per token at either level."""
    logits, batch = _logits_case(6)
    table = _token_table(logits, batch)
    A, rows = batch.advantages.tolist(), len(LOGIT_LENGTHS) + 2
    cfg = GRPOConfig(loss_type="luspo", importance_sampling_level=level)
    inputs = LossInputs(batch, rows=rows, tokens=batch.completion_mask.sum() + 5)
    loss, _ = grpo_loss(logits, inputs, LossConfig.of(cfg), SamplingParams.of(cfg))
    (grad,) = torch.autograd.grad(loss, logits)
    value = sum(-A[b] * n / rows for b, n in enumerate(LOGIT_LENGTHS))
    torch.testing.assert_close(loss, torch.tensor(value, dtype=torch.float64), **F64)
    torch.testing.assert_close(
        grad, _chain(logits, {bt: -A[bt[0]] / rows for bt in table}, table=table), **F64
    )


def test_bias_corrected_kl_on_policy_same_value_gradient_adds_k3_times_score():
    """use_bias_correction_kl multiplies k3 by r = exp(logp - sg(logp)): exactly 1 in value, so the loss is the
    same, but the KL term's gradient per token becomes grad(k3) + k3 * grad(logp) (DeepSeek-V3.2; TRL)."""
    logits, batch = _logits_case(1)
    g = torch.Generator().manual_seed(11)
    ref = -0.5 - 2 * torch.rand(batch.completion_ids.shape, generator=g, dtype=torch.float64)
    beta = 0.3
    table = _token_table(logits, batch)
    A, R, B = batch.advantages.tolist(), ref.tolist(), len(LOGIT_LENGTHS)
    results = {}
    for corr in (False, True):
        cfg = GRPOConfig(loss_type="grpo", beta=beta, kl_estimator="k3", use_bias_correction_kl=corr)
        loss, grad, _ = _run_loss(logits, batch, cfg, ref_logps=ref)
        value, dlogp = 0.0, {}
        for (b, t), (_, _, lp, _) in table.items():
            w = 1 / (B * LOGIT_LENGTHS[b])  # "grpo": the row's token mean, then the mean over rows
            k3 = math.exp(R[b][t] - lp) - (R[b][t] - lp) - 1
            dk3 = 1 - math.exp(R[b][t] - lp)  # d k3 / d logp
            value += w * (-A[b] + beta * k3)  # on-policy: the clip term is -r A with r == 1
            dlogp[b, t] = w * (-A[b] + beta * (dk3 + (k3 if corr else 0.0)))
        torch.testing.assert_close(loss, torch.tensor(value, dtype=torch.float64), **F64)
        torch.testing.assert_close(grad, _chain(logits, dlogp, table=table), **F64)
        results[corr] = (loss, grad)
    assert results[True][0].item() == pytest.approx(results[False][0].item(), rel=1e-14)
    assert (results[True][1] - results[False][1]).abs().max() > 1e-3


def test_bias_corrected_kl_off_policy_is_k3_times_the_ratio():
    """Off-policy the correction is r * k3 with r = pi / pi_old (value and gradient): the difference of the two
    losses is beta * sum_bt w_bt k3 (r - 1), of the gradients beta * sum_bt w_bt (dk3 (r - 1) + k3 r) dlogp."""
    logits, batch = _logits_case(2)
    g = torch.Generator().manual_seed(12)
    table = _token_table(logits, batch)
    ids = batch.completion_ids
    logp = torch.log_softmax(logits.detach(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    old = logp + 0.4 * torch.randn(ids.shape, generator=g, dtype=torch.float64)
    ref = -0.5 - 2 * torch.rand(ids.shape, generator=g, dtype=torch.float64)
    beta = 0.2
    out = {}
    for corr in (False, True):
        cfg = GRPOConfig(loss_type="bnpo", beta=beta, use_bias_correction_kl=corr, epsilon=0.3)
        out[corr] = _run_loss(logits, batch, cfg, old_logps=old, ref_logps=ref)[:2]
    olds, R = old.tolist(), ref.tolist()
    n_tokens = sum(LOGIT_LENGTHS)
    dvalue, dlogp = 0.0, {}
    for (b, t), (_, _, lp, _) in table.items():
        r = math.exp(lp - olds[b][t])
        k3 = math.exp(R[b][t] - lp) - (R[b][t] - lp) - 1
        dk3 = 1 - math.exp(R[b][t] - lp)
        dvalue += beta * k3 * (r - 1) / n_tokens  # "bnpo": every token weighs 1 / n_tokens
        dlogp[b, t] = beta * (dk3 * (r - 1) + k3 * r) / n_tokens
    torch.testing.assert_close(out[True][0] - out[False][0], torch.tensor(dvalue, dtype=torch.float64), **F64)
    torch.testing.assert_close(out[True][1] - out[False][1], _chain(logits, dlogp, table=table), **F64)


@pytest.mark.parametrize(
    ("loss_type", "quantile"), [("grpo", 1.0), ("dapo", 1.0), ("sapo", 0.5), ("vespo", 0.3)]
)
def test_entropy_bonus_subtracts_coef_times_mean_entropy_of_the_trained_tokens(loss_type, quantile):
    """loss(entropy_coef c) = loss(0) - c * mean entropy over the tokens the loss acts on (all completion tokens,
    or the top-`quantile` ones by entropy), in value and in gradient w.r.t. the logits, whatever the loss type."""
    logits, batch = _logits_case(3)
    table = _token_table(logits, batch)
    c = 0.37
    plain = _run_loss(logits, batch, GRPOConfig(loss_type=loss_type, top_entropy_quantile=quantile))
    bonus = _run_loss(
        logits,
        batch,
        GRPOConfig(loss_type=loss_type, top_entropy_quantile=quantile, entropy_coef=c),
        entropy_coef=c,
    )
    thr = _quantile([h for (_, _, _, h) in table.values()], 1 - quantile)
    acts_on = [bt for bt, (_, _, _, h) in table.items() if h >= thr]
    assert len(acts_on) == (16 if quantile == 1 else math.ceil(16 * quantile))
    mean_h = sum(table[bt][3] for bt in acts_on) / len(acts_on)
    torch.testing.assert_close(bonus[0], plain[0] - c * mean_h, **F64)
    expected = _chain(logits, dentropy={bt: -c / len(acts_on) for bt in acts_on}, table=table)
    torch.testing.assert_close(bonus[1] - plain[1], expected, **F64)


def test_top_entropy_quantile_trains_only_the_high_entropy_tokens():
    """On-policy "grpo" with top_entropy_quantile rho: the gradient is -A / (B n_b) d log p on the tokens whose
    entropy is >= the (1 - rho) quantile of the batch's token entropies, 0 on the others (n_b still counts every
    completion token of the row, as TRL's aggregation does)."""
    logits, batch = _logits_case(4)
    table = _token_table(logits, batch)
    A, B = batch.advantages.tolist(), len(LOGIT_LENGTHS)
    rho = 0.4
    _, grad, _ = _run_loss(logits, batch, GRPOConfig(loss_type="grpo", top_entropy_quantile=rho))
    thr = _quantile([H for (_, _, _, H) in table.values()], 1 - rho)
    dlogp = {bt: -A[bt[0]] / (B * LOGIT_LENGTHS[bt[0]]) for bt, v in table.items() if v[3] >= thr}
    assert 0 < len(dlogp) < len(table)
    torch.testing.assert_close(grad, _chain(logits, dlogp, table=table), **F64)


def test_off_policy_mask_in_grpo_loss_drops_exactly_the_negative_far_rows():
    logits, batch = _logits_case(5)
    ids = batch.completion_ids
    logp = torch.log_softmax(logits.detach(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    shift = torch.tensor([0.9, 0.9, 0.9, 0.1, 0.9, 0.9], dtype=torch.float64)  # mean k1 = old - logp per row
    old = logp + shift[:, None]
    thr = 0.5
    masked = _run_loss(
        logits, batch, GRPOConfig(loss_type="dapo", off_policy_mask_threshold=thr), old_logps=old
    )
    full = _run_loss(logits, batch, GRPOConfig(loss_type="dapo"), old_logps=old)
    A = batch.advantages.tolist()
    dropped = [b for b in range(len(A)) if A[b] < 0 and shift[b].item() > thr]
    assert dropped == [1, 4]  # row 3 is negative but near; rows 0, 2 positive; row 5 has A == 0
    for b in range(len(A)):
        if b in dropped:
            assert (masked[1][b] == 0).all()
        else:
            torch.testing.assert_close(masked[1][b], full[1][b], **F64)


def test_entropy_coefficient_follows_trls_adaptive_rule():
    cfg = GRPOConfig(
        use_adaptive_entropy=True,
        entropy_coef=0.2,
        entropy_coef_delta=0.125,
        entropy_coef_min=0.05,
        entropy_coef_max=0.5,
        entropy_target=0.5,
    )
    entropies = [0.9, 0.4, 0.4, 0.4, 0.5, 0.7, 0.6, 0.65, 0.8, 0.1]
    ec, loss_cfg = EntropyCoefficient(cfg.entropy_coef), LossConfig.of(cfg)
    # TRL 1.16 (_compute_loss): the coefficient applied in a step is the one set at the end of the previous step,
    # and only when that step's entropy was at or below the target (none measured yet: inf, no bonus); then it
    # moves by delta, up at or below the target, down above it, clamped to [min, max].
    coef, last, path = 0.2, math.inf, []
    for h in entropies:
        applied = coef if last <= cfg.entropy_target else 0.0
        assert ec.applied(loss_cfg) == pytest.approx(applied, abs=1e-15)
        ec.update(h, loss_cfg)
        if h <= cfg.entropy_target:
            coef = min(coef + cfg.entropy_coef_delta, cfg.entropy_coef_max)
        else:
            coef = max(coef - cfg.entropy_coef_delta, cfg.entropy_coef_min)
        last = h
        path.append(coef)
        assert ec.value == pytest.approx(coef, abs=1e-15) and ec.last_entropy == last
    assert max(path) == cfg.entropy_coef_max and min(path) == cfg.entropy_coef_min  # both clamps acted
    static = GRPOConfig(entropy_coef=0.3)
    ec = EntropyCoefficient(static.entropy_coef)
    ec.update(0.0, LossConfig.of(static))
    assert (
        ec.applied(LossConfig.of(static)) == 0.3 and ec.value == 0.3
    )  # not adaptive: constant, always applied


# ---------------------------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"loss_type": "ppo"}, "loss_type"),
        ({"top_entropy_quantile": 1.5}, "top_entropy_quantile"),
        ({"top_entropy_quantile": -0.1}, "top_entropy_quantile"),
        ({"sapo_temperature_neg": 0.0}, "sapo_temperature_neg"),
        ({"sapo_temperature_pos": -1.0}, "sapo_temperature_pos"),
        ({"vespo_lambda_pos": 0.0}, "vespo_lambda_pos"),
        ({"vespo_k_neg": -1.0}, "vespo_k_neg"),
        ({"off_policy_mask_threshold": -1.0}, "off_policy_mask_threshold"),
        ({"entropy_coef_min": 0.5, "entropy_coef_max": 0.2}, "entropy_coef_min"),
        ({"entropy_coef_delta": -0.01}, "entropy_coef_delta"),
        ({"entropy_target": -1.0}, "entropy_target"),
        ({"top_entropy_quantile": math.nan}, "top_entropy_quantile"),
    ],
)
def test_config_rejects_bad_variant_settings_naming_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        GRPOConfig(**kw)


@pytest.mark.parametrize(
    ("kw", "zero"),
    [
        ({}, True),
        ({"loss_type": "gmpo", "off_policy_mask_threshold": 0.5}, True),
        ({"beta": 0.04}, False),
        ({"entropy_coef": 0.01}, False),
        ({"entropy_coef": -0.01}, False),
        ({"use_adaptive_entropy": True}, False),  # the coefficient may become non-zero later
        ({"top_entropy_quantile": 0.2}, False),  # a skipped group's tokens would change the quantile
    ],
)
def test_loss_is_zero_without_advantage(kw, zero):
    assert GRPOConfig(**kw).loss_is_zero_without_advantage is zero


# ---------------------------------------------------------------------------------------------------------------
# the trainer (seed bank, tiny reference: a second or two per run)

QUIET = (
    "--dataset_test_split",
    "",
    *"--max_steps 2 --logging_steps 1 --save_steps 0 --dynamic_sampling false --prompt_sampler uniform".split(),
    *"--explore_rounds 0".split(),
)


def _train_rows(out: Path) -> list[dict]:
    return [r for r in read_jsonl(out / "metrics.jsonl") if r["step"] > 0]


def _moved(seed_reference: str, out: Path) -> list[str]:
    before = load_file(str(Path(seed_reference) / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    return [k for k in before if not torch.equal(before[k], after[k])]


@pytest.mark.parametrize(
    "extra",
    [
        ("--loss_type", "cispo", "--epsilon_high", "5"),
        ("--loss_type", "sapo"),
        ("--loss_type", "luspo", "--importance_sampling_level", "sequence"),
        ("--loss_type", "vespo"),
        ("--loss_type", "gmpo", "--epsilon", "0.4"),
        ("--loss_type", "dapo", "--off_policy_mask_threshold", "0.01", "--top_entropy_quantile", "0.5"),
        ("--loss_type", "grpo", "--beta", "0.04", "--entropy_coef", "0.01"),
    ],
)
def test_variants_train_two_steps_with_two_mini_batches(seed_reference, tmp_path, extra):
    out = tmp_path / "run"
    flags = [
        "--num_mini_batches",
        "2",
        "--max_generations",
        "2",
        "--max_steps",
        "4",
    ]  # (both agree: 2 a generation)
    assert run_inproc(seed_reference, out, *QUIET, *flags, *extra) == 0
    rows = _train_rows(out)
    assert [r["step"] for r in rows] == [2, 4]  # (optimizer steps, as TRL counts them: 2 a generation)
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows)
    assert len(_moved(seed_reference, out)) > 10


def test_entropy_bonus_logs_its_coefficient_and_trains_zero_advantage_groups(seed_reference, tmp_path):
    out = tmp_path / "run"
    assert run_inproc(seed_reference, out, *QUIET, "--entropy_coef", "0.01") == 0
    assert [r["entropy_coef"] for r in _train_rows(out)] == [0.01, 0.01]
    # groups whose advantages are all 0 still carry the bonus's gradient: none is left out of the forward
    tr = reference_trainer(seed_reference, tmp_path, entropy_coef=0.01)
    batch = tr.generator.generate().batch
    zero = batch.advantages.view(batch.num_groups, -1).eq(0).all(1)
    assert zero.any() and not zero.all()
    assert tr.update.active_groups(batch).tolist() == list(range(batch.num_groups))
    # without the bonus those groups are skipped (the update reads its own config: built again without it)
    tr.update.loss_cfg = LossConfig.of(replace(tr.cfg, entropy_coef=0.0))
    assert tr.update.active_groups(batch).tolist() == torch.nonzero(~zero).flatten().tolist()


@pytest.mark.slow
def test_adaptive_entropy_resumes_exactly(seed_reference, tmp_path):
    common = [*QUIET, *"--save_steps 2 --lr_scheduler_type constant --use_adaptive_entropy true".split()]
    # target above any entropy of a 16-token vocabulary: the coefficient rises by delta after every step, and the
    # bonus applies from the second step (the first has no measured entropy yet)
    common += "--entropy_coef 0.01 --entropy_coef_delta 0.01 --entropy_target 10".split()
    out, straight = tmp_path / "resumed", tmp_path / "straight"
    assert run_inproc(seed_reference, out, *common, "--max_steps", "4") == 0
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["policy_update"]["entropy_coef"]["value"] == pytest.approx(0.05)
    assert 0 < state["policy_update"]["entropy_coef"]["last_entropy"] < 10
    assert (
        run_inproc(seed_reference, out, *common, "--max_steps", "6", "--resume_from_checkpoint", "latest")
        == 0
    )
    assert run_inproc(seed_reference, straight, *common, "--max_steps", "6") == 0

    def strip(r):
        return {k: v for k, v in r.items() if not k.startswith(TIMING_PREFIXES)}

    rows = _train_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["entropy_coef"] for r in rows] == pytest.approx([0.02, 0.03, 0.04, 0.05, 0.06, 0.07])
    assert [strip(r) for r in rows] == [strip(r) for r in _train_rows(straight)]
    a = load_file(str(out / "final" / "model.safetensors"))
    b = load_file(str(straight / "final" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------------------------------------------
# the registry: a new loss is one decorated function


@pytest.fixture
def scaled_reinforce():
    """A loss registered for the length of one test: -2 A log pi per token, reduced as dapo."""

    @register_policy_loss("twice_reinforce", aggregation="dapo")
    def twice_reinforce(logp, old_logp, advantages, mask, cfg):
        never = torch.zeros_like(mask, dtype=torch.bool)
        stats = {
            "ratio": torch.ones_like(logp),
            "low_clipped": never,
            "high_clipped": never,
            "clipped": never,
        }
        return -2.0 * advantages.unsqueeze(-1).to(logp.dtype) * logp, stats

    yield "twice_reinforce"
    del POLICY_LOSSES["twice_reinforce"]


def test_a_registered_loss_is_a_loss_type_and_grpo_loss_runs_it(scaled_reinforce):
    """Registered after the config module was loaded, the loss is a valid loss_type, grpo_loss calls it and reduces
    it by its aggregation: twice the on-policy dapo gradient, by an independent chain rule."""
    logits, batch = _logits_case(7)
    cfg = GRPOConfig(loss_type=scaled_reinforce)  # (accepted: the config checks the live registry)
    loss, grad, _ = _run_loss(logits, batch, cfg)
    _, dapo_grad, _ = _run_loss(
        logits.detach().clone().requires_grad_(True), batch, GRPOConfig(loss_type="dapo")
    )
    torch.testing.assert_close(grad, 2 * dapo_grad, **F64)
    table = _token_table(logits, batch)
    tokens = float(batch.completion_mask.sum())
    A = batch.advantages.tolist()
    by_hand = _chain(logits, dlogp={(b, t): -2 * A[b] / tokens for (b, t) in table}, table=table)
    torch.testing.assert_close(grad, by_hand, **F64)
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss(scaled_reinforce)(lambda *a: None)
    with pytest.raises(ValueError, match="aggregation must be one of"):
        register_policy_loss("other", aggregation="median")(lambda *a: None)
    assert "other" not in POLICY_LOSSES
