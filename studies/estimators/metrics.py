"""The metrics of the estimators study: pure functions of the K estimates and the exact gradient."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

FINGERPRINT_DIMS = 8  # random directions each g is projected on, to find variants whose g coincide
COINCIDE_RTOL = 1e-4  # |projection difference| <= rtol * |g| on every batch: the same estimate

STATISTICS = ("cos_mean", "cos_mean_raw", "alpha", "rel_bias", "rel_bias2", "rel_bias_raw", "rel_var")
SPAN_STATISTICS = ("rel_bias2_out", "rel_bias2_in", "rel_bias_out")


def _statistics(
    n: Any, s2: Any, sp: Any, q: Any, b: Any, gnorm: float, so2: Any = None, qo: Any = None
) -> dict[str, np.ndarray]:
    """Every statistic of the mean from sums over n batches: s2 = |sum g|^2, sp = <sum g, u>, q = sum |g|^2,
    b = sum <g, u>^2 (u = g* / |g*|); with so2 = |sum g_out|^2 and qo = sum |g_out|^2, g_out the part of g outside
    the span of the prompts' exact gradients, the bias splits into the part out of that span and the rest.
    Vectorised: the jackknife passes arrays of leave-one-out sums."""
    n, s2, sp, q, b = (np.asarray(x, dtype=np.float64) for x in (n, s2, sp, q, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        pairs = n * (n - 1)
        u_all = (s2 - q) / pairs  # sum over j != k of <g_j, g_k>, over the pairs: unbiased for |E g|^2
        u_par = (sp**2 - b) / pairs  # the same for <E g, u>^2
        u_perp = u_all - u_par  # |E g - <E g, u> u|^2
        p = sp / n  # <mean g, u>
        rel_bias2 = u_perp / u_par
        out = {
            # Not clipped at 1: above 1 by noise when E g is along g* (its SE says by how much).
            "cos_mean": np.sign(p) * np.sqrt(np.maximum(u_par, 0.0) / u_all),
            "cos_mean_raw": sp / np.sqrt(s2),
            "alpha": p / gnorm,
            "rel_bias": np.sqrt(np.maximum(rel_bias2, 0.0)),
            "rel_bias2": rel_bias2,
            "rel_bias_raw": np.sqrt(np.maximum(s2 / n**2 - p**2, 0.0)) / np.abs(p),
            "rel_var": ((q - s2 / n) / (n - 1)) / u_all,
        }
        if so2 is not None:
            # |E g_out|^2: no reweighting of the prompts' gradients explains it (a bias within prompts)
            rel_out = ((np.asarray(so2) - np.asarray(qo)) / pairs) / u_par
            out |= {
                "rel_bias2_out": rel_out,
                "rel_bias2_in": rel_bias2 - rel_out,
                "rel_bias_out": np.sqrt(np.maximum(rel_out, 0.0)),
            }
        return out


def jackknife_se(full: float, leave_one_out: np.ndarray) -> float:
    """Delete-one jackknife standard error: sqrt((n - 1) / n * sum_k (theta_(-k) - mean)^2)."""
    x = np.asarray(leave_one_out, dtype=np.float64)
    if not np.isfinite(full) or not np.all(np.isfinite(x)):
        return math.nan
    n = x.size
    return float(math.sqrt((n - 1) / n * float(((x - x.mean()) ** 2).sum())))


def estimator_metrics(
    X: np.ndarray | Tensor, g_star: np.ndarray | Tensor, per_prompt: np.ndarray | Tensor | None = None
) -> dict[str, Any]:
    """Bias, scale and variance of the estimates X (K, D) of the direction g* (D,), with jackknife standard errors
    ("<name>_se"); mean per-batch cosine (a zero estimate counts as 0) and its standard error; zero_frac.

    per_prompt (P, D): the exact gradient of each prompt's expected reward, g* in their span. Adds the split of the
    squared relative bias into the part out of their span (rel_bias2_out: a bias within prompts, e.g. towards
    shorter completions) and the rest (rel_bias2_in: E g weighs the prompts otherwise than J does), and
    prompt_weights: E g's least-squares coefficients on the prompts' gradients over their mean (all 1 for an
    estimator unbiased in direction), with jackknife SEs."""
    X = torch.as_tensor(X, dtype=torch.float64)
    g = torch.as_tensor(g_star, dtype=torch.float64)
    K = X.size(0)
    if K < 3:
        raise ValueError(f"need at least 3 estimates, got {K}")
    gnorm = float(g.norm())
    u = g / gnorm
    a = (X @ u).numpy()  # (K,) <g_k, u>
    q = torch.linalg.vecdot(X, X).numpy()  # (K,) |g_k|^2
    S = X.sum(0)
    sdot = (X @ S).numpy()  # (K,) <g_k, sum g>
    s2, sp, Q, B = float(S @ S), float(a.sum()), float(q.sum()), float((a * a).sum())
    # Leave batch k out: |S - g_k|^2 = |S|^2 - 2 <S, g_k> + |g_k|^2, and the other sums lose their k-th term.
    full_sums = [K, s2, sp, Q, B, gnorm]
    loo_sums = [K - 1, s2 - 2 * sdot + q, sp - a, Q - q, B - a * a, gnorm]
    names = list(STATISTICS)
    if per_prompt is not None:
        Gp = torch.as_tensor(per_prompt, dtype=torch.float64)  # (P, D)
        basis, tri = torch.linalg.qr(Gp.T)  # Gp.T = basis @ tri, basis (D, P) orthonormal
        Z = X @ basis  # (K, P) each estimate's coordinates in that span
        sZ = Z.sum(0)
        zq = (Z * Z).sum(1).numpy()
        zdot = (Z @ sZ).numpy()
        so2, qo = s2 - float(sZ @ sZ), q - zq  # |S_out|^2, |g_k,out|^2
        full_sums += [so2, float(qo.sum())]
        loo_sums += [so2 - 2 * (sdot - zdot) + qo, float(qo.sum()) - qo]
        names += SPAN_STATISTICS
    full = _statistics(*full_sums)
    loo = _statistics(*loo_sums)
    # The noise floor of the squared biases. Where E g has (nearly) no component in a subspace, the pair sum over
    # it is a degenerate U-statistic: its jackknife SE scales with the sample mean's own noise there, so it is itself
    # noisy and can come out far too small. Its variance is 2 tr(Sigma_sub^2) / (K (K - 1)) (Sigma_sub: g's
    # covariance in the subspace), with tr(Sigma_sub^2) = E <e_j, e_k>^2 over independent centred estimates,
    # estimated from the K - 1 consecutive pairs. The SE reported is the larger of the two.
    m2 = s2 / K**2
    nxt = torch.linalg.vecdot(X[:-1], X[1:]).numpy()  # (K-1,) <g_k, g_k+1>
    d_all = nxt - (sdot[:-1] + sdot[1:]) / K + m2  # <g_k - mean, g_k+1 - mean>
    ac = a - a.mean()
    d_perp = d_all - ac[:-1] * ac[1:]  # ... of the parts orthogonal to g*
    floors = {"rel_bias2": d_perp}
    if per_prompt is not None:
        Zc = (Z - Z.mean(0)).numpy()
        d_out = d_all - (Zc[:-1] * Zc[1:]).sum(1)  # ... of the parts outside the prompts' span
        floors |= {"rel_bias2_out": d_out, "rel_bias2_in": d_perp - d_out}
    u_par = (sp**2 - B) / (K * (K - 1))
    se_floor = {
        k: math.sqrt(2 * float(np.mean(d**2)) / (K * (K - 1))) / abs(u_par) if u_par else math.nan
        for k, d in floors.items()
    }
    # cos(mean) = 1 / sqrt(1 + rel_bias2) when E g is along g*: d cos = -cos^3 / 2 d rel_bias2
    se_floor["cos_mean"] = 0.5 * abs(float(full["cos_mean"])) ** 3 * se_floor["rel_bias2"]
    out: dict[str, Any] = {}
    for name in names:
        value = float(full[name])
        out[name] = value
        out[f"{name}_se"] = max(jackknife_se(value, loo[name]), se_floor.get(name, 0.0))
    # A root clipped at 0 has no jackknife SE worth the name: the delta method from its square, where it is > 0.
    for root, square in (("rel_bias", "rel_bias2"), ("rel_bias_out", "rel_bias2_out")):
        if root in out:
            r = out[root]
            out[f"{root}_se"] = out[f"{square}_se"] / (2 * r) if r > 0 else math.nan
    if per_prompt is not None:
        # (K, P) each g_k's least-squares coefficients c on the prompts' gradients: Gp.T c = basis @ Z_k, so
        # tri @ c = Z_k (linear in g_k, so the mean's coefficients are the mean of these)
        C = torch.linalg.solve_triangular(tri, Z.T, upper=True).T.numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            w = C.mean(0) / C.mean(0).mean()
            w_loo = (C.sum(0) - C) / (K - 1)
            w_loo = w_loo / w_loo.mean(1, keepdims=True)
        out["prompt_weights"] = w.tolist()
        out["prompt_weights_se"] = [jackknife_se(w[i], w_loo[:, i]) for i in range(w.size)]
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(q > 0, a / np.sqrt(q), 0.0)
    out["mean_cos"] = float(cos.mean())
    out["mean_cos_se"] = float(cos.std(ddof=1) / math.sqrt(K))
    out["zero_frac"] = float((q == 0).mean())
    out["batches"] = K
    return out


def fingerprint(X: Tensor, dims: int = FINGERPRINT_DIMS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(K, dims) projections of the estimates on fixed random unit directions, and (K,) their norms: enough to tell
    whether two variants gave the same estimate on every batch without keeping either."""
    gen = torch.Generator().manual_seed(seed)
    R = torch.randn(X.size(1), dims, generator=gen, dtype=torch.float64)
    R /= R.norm(dim=0, keepdim=True)
    return (X.double() @ R).numpy(), X.double().norm(dim=1).numpy()


def coincide(fa: tuple[np.ndarray, np.ndarray], fb: tuple[np.ndarray, np.ndarray], rtol: float) -> bool:
    (pa, na), (pb, nb) = fa, fb
    scale = np.maximum(np.maximum(na, nb), 1e-30)[:, None]
    return bool(np.all(np.abs(pa - pb) <= rtol * scale))


def coinciding_groups(prints: dict[str, dict[str, Any]], variants: list[str]) -> list[list[str]]:
    """Groups of variants whose estimates coincide on every batch of every G they share (COINCIDE_RTOL)."""
    groups: list[list[str]] = []
    for v in variants:
        for grp in groups:
            shared = [G for G, fp in prints.items() if v in fp and grp[0] in fp]
            if shared and all(coincide(prints[G][v], prints[G][grp[0]], COINCIDE_RTOL) for G in shared):
                grp.append(v)
                break
        else:
            groups.append([v])
    return [g for g in groups if len(g) > 1]
