"""The estimators study: its metrics against direct computations and vectors whose bias and variance are known by
construction, a batch's estimate against the policy gradient written out by hand, and one tiny run end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from _numerics import F32_EPS, F64_EPS, ORDER_TERMS, assert_same_math

from studies import estimators as est

# ================================================================================================ the metrics


def direct_metrics(X: np.ndarray, g: np.ndarray) -> dict[str, float]:
    """The definitions, written out: pair sums over j != k by a double loop, the mean vector, its projection."""
    K = X.shape[0]
    u = g / np.linalg.norm(g)
    pairs = [(j, k) for j in range(K) for k in range(K) if j != k]
    U = sum(X[j] @ X[k] for j, k in pairs) / len(pairs)
    U_par = sum((X[j] @ u) * (X[k] @ u) for j, k in pairs) / len(pairs)
    m = X.mean(0)
    alpha = (m @ g) / (g @ g)
    var = sum(np.sum((x - m) ** 2) for x in X) / (K - 1)
    return {
        "cos_mean": math.copysign(math.sqrt(U_par / U), m @ u),
        "cos_mean_raw": (m @ g) / (np.linalg.norm(m) * np.linalg.norm(g)),
        "alpha": alpha,
        "rel_bias2": (U - U_par) / U_par,
        "rel_bias_raw": np.linalg.norm(m - alpha * g) / np.linalg.norm(alpha * g),
        "rel_var": var / U,
    }


def test_metrics_and_jackknife_follow_the_definitions():
    rng = np.random.default_rng(0)
    K, D = 9, 6
    g = rng.normal(size=D)
    X = 0.7 * g + rng.normal(size=(K, D))
    m = est.estimator_metrics(X, g)
    want = direct_metrics(X, g)
    for name, value in want.items():
        assert m[name] == pytest.approx(value, rel=1e-9), name
    # The jackknife: each statistic recomputed with one batch deleted, from scratch; for the squared bias and
    # cos(mean), at least the SD of a zero-bias pair sum, from consecutive centred, projected estimates.
    e = X - X.mean(0)
    u = g / np.linalg.norm(g)
    e_perp = e - np.outer(e @ u, u)
    tr2 = np.mean([(e_perp[k] @ e_perp[k + 1]) ** 2 for k in range(K - 1)])
    floor = math.sqrt(2 * tr2 / (K * (K - 1))) / ((X @ u).sum() ** 2 - ((X @ u) ** 2).sum()) * K * (K - 1)
    floors = {"rel_bias2": floor, "cos_mean": 0.5 * abs(want["cos_mean"]) ** 3 * floor}
    for name in want:
        loo = np.array([direct_metrics(np.delete(X, k, axis=0), g)[name] for k in range(K)])
        se = math.sqrt((K - 1) / K * np.sum((loo - loo.mean()) ** 2))
        assert m[f"{name}_se"] == pytest.approx(max(se, floors.get(name, 0)), rel=1e-7), name
    assert floor > 0
    cos = (X @ g) / (np.linalg.norm(X, axis=1) * np.linalg.norm(g))
    assert m["mean_cos"] == pytest.approx(cos.mean())
    assert m["mean_cos_se"] == pytest.approx(cos.std(ddof=1) / math.sqrt(K))
    assert m["zero_frac"] == 0 and m["batches"] == K


def biased_estimates(rng, K: int, D: int, alpha: float, bias: float, sigma: float):
    """g_k = alpha g* + b + sigma * noise with b orthogonal to g*, |g*| = 1, |b| = bias: everything known."""
    g = np.zeros(D)
    g[0] = 1.0
    b = np.zeros(D)
    b[1] = bias
    X = alpha * g + b + sigma * rng.normal(size=(K, D))
    mean_norm2 = alpha**2 + bias**2
    truth = {
        "alpha": alpha,
        "cos_mean": alpha / math.sqrt(mean_norm2),
        "rel_bias": bias / alpha,
        "rel_var": D * sigma**2 / mean_norm2,
    }
    return X, g, truth


def test_known_bias_scale_and_variance_are_recovered():
    X, g, truth = biased_estimates(np.random.default_rng(1), K=2000, D=30, alpha=0.5, bias=0.2, sigma=0.4)
    m = est.estimator_metrics(X, g)
    for name, value in truth.items():
        assert abs(m[name] - value) < 4 * m[f"{name}_se"], (name, m[name], value, m[f"{name}_se"])
        assert m[f"{name}_se"] < 0.1 * abs(value)  # the check above has teeth


def test_bias_splits_into_a_reweighting_of_prompts_and_the_rest():
    # E g = alpha * sum_p c_p g*_p / P + b_out, with b_out orthogonal to every prompt's gradient g*_p: the prompts
    # are weighed c (not 1), and b_out is a bias within prompts.
    rng = np.random.default_rng(4)
    D, P, K = 40, 3, 3000
    per_prompt = rng.normal(size=(P, D))
    g = per_prompt.mean(0)
    c = np.array([1.5, 1.0, 0.5])
    basis, _ = np.linalg.qr(per_prompt.T)
    b_out = rng.normal(size=D)
    b_out -= basis @ (basis.T @ b_out)
    b_out *= 0.3 * np.linalg.norm(g) / np.linalg.norm(b_out)
    mean_in = 0.5 * c @ per_prompt / P
    X = mean_in + b_out + 0.3 * rng.normal(size=(K, D))
    u = g / np.linalg.norm(g)
    par2 = (mean_in @ u) ** 2
    truth = {
        "rel_bias2": (np.sum((mean_in + b_out) ** 2) - par2) / par2,
        "rel_bias2_out": np.sum(b_out**2) / par2,
        "rel_bias2_in": (np.sum(mean_in**2) - par2) / par2,
    }
    m = est.estimator_metrics(X, g, per_prompt)
    for name, value in truth.items():
        assert abs(m[name] - value) < 4 * m[f"{name}_se"], (name, m[name], value)
        assert m[f"{name}_se"] < 0.2 * value
    for w, se, want in zip(m["prompt_weights"], m["prompt_weights_se"], c, strict=True):
        assert abs(w - want) < 4 * se and se < 0.05
    # The out-of-span pair sum, written out on a few batches.
    Y = X[:6]
    small = est.estimator_metrics(Y, g, per_prompt)
    out = Y - (Y @ basis) @ basis.T
    pairs = [(j, k) for j in range(6) for k in range(6) if j != k]
    U_out = np.mean([out[j] @ out[k] for j, k in pairs])
    U_par = np.mean([(Y[j] @ u) * (Y[k] @ u) for j, k in pairs])
    assert small["rel_bias2_out"] == pytest.approx(U_out / U_par, rel=1e-8)


def test_noise_correction_unbiased_direction():
    # Unbiased in direction, but so noisy that the mean of K batches is far from g*: the plain cosine of the sample
    # mean is well below 1; the U-statistic estimates put E g on g*.
    X, g, _ = biased_estimates(np.random.default_rng(2), K=300, D=200, alpha=1.0, bias=0.0, sigma=1.0)
    m = est.estimator_metrics(X, g)
    assert m["cos_mean_raw"] < 0.85
    assert abs(m["cos_mean"] - 1) < 3 * m["cos_mean_se"]
    assert abs(m["rel_bias2"]) < 3 * m["rel_bias2_se"]
    assert abs(m["rel_var"] - 200) < 4 * m["rel_var_se"]


def test_jackknife_standard_errors_are_calibrated():
    # Over independent repeats, the spread of each estimate matches the jackknife SE of one repeat.
    rng = np.random.default_rng(3)
    names = ("alpha", "cos_mean", "rel_bias2", "rel_var")
    runs = [
        est.estimator_metrics(*biased_estimates(rng, K=150, D=20, alpha=0.5, bias=0.2, sigma=0.5)[:2])
        for _ in range(200)
    ]
    for name in names:
        spread = np.std([r[name] for r in runs], ddof=1)
        se = np.mean([r[f"{name}_se"] for r in runs])
        assert 0.75 < se / spread < 1.33, (name, se, spread)


def test_standard_error_of_a_zero_bias_is_not_too_small():
    # Unbiased in direction, the noise in few dimensions (one dominates): the pair sum of the bias is degenerate and
    # its jackknife SE alone swings with the sample mean; with the floor no |z| reaches 3 in 300 repeats.
    rng = np.random.default_rng(5)
    D, K = 12, 60
    g = np.eye(D)[0]
    scale = np.ones(D)
    scale[1:3] = [10.0, 3.0]
    zs = []
    for _ in range(300):
        m = est.estimator_metrics(g + 0.02 * rng.normal(size=(K, D)) * scale, g)
        zs.append(m["rel_bias2"] / m["rel_bias2_se"])
    assert np.max(np.abs(zs)) < 3


def test_a_zero_estimate_is_no_step():
    g = np.array([1.0, 0.0])
    X = np.array([[1.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.0, 0.0]])
    m = est.estimator_metrics(X, g)
    assert m["mean_cos"] == pytest.approx((1 / math.sqrt(2) + 1) / 4)
    assert m["zero_frac"] == 0.5
    with pytest.raises(ValueError, match="at least 3"):
        est.estimator_metrics(X[:2], g)


def test_coinciding_variants_are_grouped():
    X = torch.randn(20, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    prints = {
        "4": {"a": est.fingerprint(X), "b": est.fingerprint(X * (1 + 1e-7)), "c": est.fingerprint(2 * X)},
        "2": {"a": est.fingerprint(X[:5]), "b": est.fingerprint(X[:5]), "c": est.fingerprint(X[:5])},
    }
    # c equals a at G=2 only: not the same estimator.
    assert est.coinciding_groups(prints, ["a", "b", "c"]) == [["a", "b"]]


# ================================================================================================ one batch


def test_estimate_is_the_policy_gradient_written_out(tok):
    # The study's g (through the trainer's PolicyUpdate and grpo_loss) against the surrogate written from the papers:
    # reinforce / dr_grpo: (1 / (B T)) sum_i A_i log pi(y_i); grpo: (1 / B) sum_i A_i / |y_i| log pi(y_i), with
    # A_i = r_i, r_i - group mean, (r_i - group mean) / (unbiased group std + 1e-4). log pi(y_i) from one plain
    # forward of prompt + completion per row, no padding.
    from tiny_lm import TinyLMConfig, TinyLMForCausalLM

    torch.manual_seed(0)
    # float64: the estimator's path and the hand-written surrogate sum in different orders (tests/_numerics.py)
    model = TinyLMForCausalLM(TinyLMConfig(n_embd=32, n_head=2, initializer_range=0.3)).eval().double()
    prompts, T, G = ["1+2=", "37+48="], 3, 4
    sampler = est.Sampler(model, tok, prompts, ["3", "85"], T)
    draw = sampler.draw(G, torch.Generator().manual_seed(0))
    draw.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # (the second group: no signal)
    processes = est.one_process()
    params = list(model.parameters())
    r = draw.rewards.view(-1, G).double()
    lengths = draw.lengths.double()
    logp = []
    for i in range(len(prompts) * G):
        p = tok(prompts[i // G])["input_ids"]
        n = int(lengths[i])
        y = draw.completion_ids[i, :n].tolist()
        logits = model(input_ids=torch.tensor([p + y])).logits[0, len(p) - 1 : len(p) - 1 + n]
        logp.append(torch.log_softmax(logits.double(), -1)[torch.arange(n), torch.tensor(y)].sum())
    logp = torch.stack(logp)
    centred = r - r.mean(1, keepdim=True)
    zscore = centred / (r.std(1, keepdim=True) + 1e-4)
    B = len(prompts) * G
    surrogates = {
        "reinforce": (r.flatten() * logp).sum() / (B * T),
        "dr_grpo": (centred.flatten() * logp).sum() / (B * T),
        "grpo": (zscore.flatten() * logp / lengths).sum() / B,
    }
    # The trainer's advantages are float32 by design (rewards are float32): grpo's z-score rounds a few times (std,
    # + 1e-4, the division), so its g differs from the float64 surrogate by at most a few float32 roundings of
    # each sample's weight: |g - g*| <= 8 eps32 sum_i |w_i| |grad log pi(y_i)| (w_i its weight in the surrogate).
    per_sample = torch.stack(
        [torch.cat([d.flatten() for d in torch.autograd.grad(lp, params, retain_graph=True)]) for lp in logp]
    )  # (B, parameters)
    weights = {"grpo": zscore.flatten() / lengths / B}
    for name, surrogate in surrogates.items():
        want = torch.cat(
            [d.flatten() for d in torch.autograd.grad(surrogate, params, retain_graph=True)]
        ).double()
        got = est.Estimator(est.variant_config(name, G, len(prompts), T), model, sampler, processes).gradient(
            draw
        )
        if name in weights:  # float32 advantages: the bound above
            bound = 8 * F32_EPS * (weights[name].abs()[:, None] * per_sample.abs()).sum(0)
            slack = ORDER_TERMS * F64_EPS * max(1.0, float(want.abs().max()))  # float64's own orders
            assert bool(((got - want).abs() <= bound + slack).all()), name
        else:  # 0/1 rewards and their group means are exact in float32: only float64's orders differ
            assert_same_math(got, want, msg=name)
        assert float(want.norm()) > 0
    draw.rewards = torch.zeros(B)  # no group with signal: the trainer takes no step
    zero = est.Estimator(est.variant_config("dr_grpo", G, 2, T), model, sampler, processes).gradient(draw)
    assert not zero.any()


def test_every_variant_builds_a_valid_config():
    for name, v in est.VARIANTS.items():
        cfg = est.variant_config(name, max(4, v.min_G), 3)
        assert cfg.per_device_train_batch_size == 3 * cfg.num_generations
        assert not cfg.needs_old_logps  # on-policy: the ratio is exactly 1
        assert v.what


# ================================================================================================ end to end


@pytest.mark.slow
def test_tiny_run_end_to_end(seed_reference, tmp_path):
    out, docs = tmp_path / "out", tmp_path / "docs"
    argv = [
        "--model_name_or_path",
        seed_reference,
        "--prompts",
        "1+2=",
        "3+4=",
        "--variants",
        "grpo",
        "dr_grpo",
    ]
    argv += ["--G", "2", "--batches", "5", "--output_dir", str(out), "--docs", str(docs)]
    assert est.main(argv) == 0
    res = json.loads((out / "estimators.json").read_text())
    (pol,) = res["policies"].values()
    assert pol["prompts"] == ["1+2=", "3+4="] and pol["answers"] == ["3", "7"]
    assert all(0 <= a <= 1 for a in pol["accuracy"])
    assert pol["grad_norm"] > 0
    for v in ("grpo", "dr_grpo"):
        cell = pol["cells"][v]["2"]
        assert cell["batches"] == 5 and cell["completions_per_batch"] == 4
        assert 0 <= cell["zero_frac"] <= 1 and -1 <= cell["mean_cos"] <= 1
    md = (docs / "estimators.md").read_text()
    assert "| dr_grpo |" in md and "What it shows" in md
    assert (docs / "estimators.png").stat().st_size > 0
    # the docs again from the JSON alone
    (docs / "estimators.md").unlink()
    assert est.main(["--output_dir", str(out), "--docs", str(docs), "--rewrite_docs"]) == 0
    assert (docs / "estimators.md").read_text() == md
