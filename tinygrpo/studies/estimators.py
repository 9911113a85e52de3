"""What each estimator estimates: the sampled gradient of every GRPO variant against the exact gradient of J.

    python -m tinygrpo.studies.estimators --docs docs    # both policies, every variant, G = 2..32, K = 200 (~6 min)
    python -m tinygrpo.studies.estimators --policies reference --variants grpo dr_grpo --G 4 --batches 50  # a look
    python -m tinygrpo.studies.estimators --model_name_or_path DIR --prompts 1+2= 3+4= --G 2 --batches 8  # any model
    python -m tinygrpo.studies.estimators --docs docs --rewrite_docs      # the docs again from the JSON, no run

Why. GRPO climbs J(theta) = mean over prompts x of sum_y pi(y | x) R(x, y). On this task every completion can be
listed (tinygrpo/exact.py), so for a batch of prompts J's gradient g* is known exactly, and so is each prompt's. One
GRPO step computes, from G sampled completions per prompt, a loss whose negated gradient g is meant to point along
g*. Where a variant's g points on average, how long it is and how noisy, is a property of the estimator alone
(advantages, normalisers, ratios), measured here for each variant and group size G, on a real transformer:

- cos(mean): the cosine of E g with g* (1: unbiased in direction). The plain cosine of the mean of K batches is
  pulled below 1 by their Monte Carlo noise alone (far below for a noisy estimator; it is in the JSON as
  cos_mean_raw), so |E g|^2 and <E g, u>^2 (u = g* / |g*|) are estimated by U-statistics, sums over pairs of
  DIFFERENT batches (1/(K(K-1)) sum_{j != k} <g_j, g_k>), which are unbiased: cos(mean) = sqrt(<E g, u>^2 / |E g|^2),
  above 1 by noise when E g is along g*.
- relative bias |E g - alpha g*| / |alpha g*|: the part of E g not along g*, relative to the part along it, from the
  same U-statistics (rel_bias2, its square, is 0 in expectation for an estimator unbiased in direction and can come
  out negative; rel_bias_raw is the plain |mean g - alpha g*| / |alpha g*|, noise included). It splits into the part
  outside the span of the prompts' exact gradients (rel_bias2_out: a bias within prompts, e.g. a pull towards short
  completions) and the rest (rel_bias2_in: E g weighs the prompts otherwise than J does); prompt_weights are E g's
  least-squares coefficients on the prompts' gradients over their mean (all 1 for an unbiased direction).
- scale alpha = <E g, g*> / |g*|^2: the step's length along g* (normalisers and the group std rescale it).
- relative variance E|g - E g|^2 / |E g|^2: unbiased sample variance over the unbiased |E g|^2.
- mean cos: the mean over batches of cos(g_k, g*), how well ONE step points; a batch without a group with signal
  gives g = 0 (the trainer takes no step there) and counts as cosine 0 (zero_frac says how often).
- A variant built for another objective (pass_at_k: pass@k) is also measured against that objective's exact
  gradient (own_target), mean_x k (1 - acc(x))^(k-1) grad acc(x).
Standard errors: delete-one jackknife over the K batches (a numerical delta method: each statistic is a smooth
function of sums over batches, recomputed with each batch left out); for the squared biases and cos(mean), at least
the standard deviation of a pair sum over a subspace where E g is zero (a degenerate U-statistic, whose jackknife SE
is itself noisy and can come out far too small), 2 tr(Sigma_sub^2) / (K (K - 1)), estimated from consecutive batches.
The standard error of the mean for mean cos. Completions per batch (P * G) are reported so that readers can compare
at equal samples.

How a batch becomes g: as the trainer's on-policy first mini-batch. `sample_completions` at temperature 1 (the
trainer's sampler and backend), the `accuracy` reward computed as tinygrpo/generation.py does, advantages by
`advantage_estimators.advantages` with the variant's settings, then the trainer's own `PolicyUpdate.prepare`
(zero-advantage groups left out, normalisers over the whole mini-batch, the dapo normaliser) and `PolicyUpdate.loss`
(`grpo_loss`, the ratio exactly 1), whose gradient w.r.t. the parameters, negated, is g. No dynamic sampling and no
explore rounds: the estimator of one batch. Every variant sees the same K batches (common random numbers), so
differences between variants are not sampling luck, and variants whose g coincide on every batch are reported.

Setup. Policies: `reference` (checkpoints/reference) and `mid` (60 steps of train_grpo.py's default recipe from the
reference, as the studies run it, trained into OUTPUT_DIR/policy-mid when missing). Prompts: from the `validation`
split of data/addition (every choice a study makes is on validation), shuffled with --seed, scanned in chunks of 32
with their exact expected accuracy, the first P whose accuracy is in --accuracy_range kept, per policy (a prompt
answered always or never has no gradient). Completions of at most 4 tokens, as the trainer's default.

Writes OUTPUT_DIR/estimators.json (every number; null where a statistic is undefined) and, with `--docs DIR`,
DIR/estimators.md (setup, what the numbers show, tables) and DIR/estimators.png.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from ._runs import REPO, log_path, train

if TYPE_CHECKING:
    from ..config import GRPOConfig
    from ..distributed import Processes
    from ..exact import CompletionSpace, ExactResult

# ------------------------------------------------------------------------------------------------------------------
# the variants


@dataclass(frozen=True)
class Variant:
    """A GRPOConfig override set and what it is."""

    overrides: dict[str, Any]
    what: str
    min_G: int = 2
    target: str = "J"  # the objective whose gradient the variant is built to estimate (also measured against)


PASS_K = 4


# The advantage-mode variants use dr_grpo's constant normaliser (B * max_completion_length, no std), so that they
# differ from dr_grpo only in their advantages. (The sweep study's "rloo" and "reinforce" keep the trainer's default
# dapo normaliser.)
VARIANTS: dict[str, Variant] = {
    "grpo": Variant(
        {"loss_type": "grpo"}, "group z-score advantages, per-sequence token mean (Shao et al. 2024)"
    ),
    "dr_grpo": Variant(
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "group-mean baseline without the std, token sum / B*T (Dr. GRPO, Liu et al. 2025)",
    ),
    "dapo": Variant(
        {"loss_type": "dapo"},
        "the trainer's default: z-score advantages, token sum / the batch's tokens (DAPO)",
    ),
    "bnpo": Variant({"loss_type": "bnpo"}, "z-score advantages, token sum / the mini-batch's tokens (BNPO)"),
    "rloo": Variant(
        {"advantage_mode": "rloo", "loss_type": "dr_grpo"},
        "leave-one-out baseline, token sum / B*T (RLOO, Ahmadian et al. 2024)",
    ),
    "reinforce": Variant(
        {"advantage_mode": "reinforce", "loss_type": "dr_grpo"}, "raw reward, no baseline, token sum / B*T"
    ),
    "cispo": Variant(
        {"loss_type": "cispo", "epsilon_high": 5.0},
        "detached importance weight capped at 5 times log pi, dapo's normaliser (CISPO, MiniMax-M1)",
    ),
    "gspo": Variant(
        {"loss_type": "grpo", "importance_sampling_level": "sequence"},
        "length-normalised sequence ratio, grpo's aggregation (GSPO, Zheng et al. 2025; TRL's pairing)",
    ),
    "sapo": Variant(
        {"loss_type": "sapo"}, "soft sigmoid gate on the ratio, per-sequence mean (SAPO, Gao et al. 2025)"
    ),
    "gmpo": Variant(
        {"loss_type": "gmpo"}, "geometric mean of the token ratios, per-sequence (GMPO, Zhao et al. 2025)"
    ),
    "opo": Variant(
        {"advantage_mode": "opo", "loss_type": "dr_grpo"},
        "length-weighted group-mean baseline, token sum / B*T (OPO, Hao et al. 2025)",
    ),
    "reinforce_pp_baseline": Variant(
        {"advantage_mode": "reinforce_pp_baseline", "loss_type": "dr_grpo"},
        "group mean subtracted, then whitened over the batch's tokens, token sum / B*T (REINFORCE++-baseline)",
    ),
    "pass_at_k": Variant(
        {"advantage_mode": "pass_at_k", "train_pass_k": PASS_K, "loss_type": "dr_grpo"},
        "the pass@4 objective's advantages, token sum / B*T (Chen et al. 2025); G > 4 only (at G = k every "
        "group's pass@k estimate is 0 or 1: no signal)",
        min_G=PASS_K + 1,
        target="pass@k",
    ),
}
DEFAULT_G = [2, 4, 8, 16, 32]
DEFAULT_BATCHES = 200
DEFAULT_PROMPTS = 12
DEFAULT_RANGE = (0.05, 0.95)
MID_STEPS = 60
MAX_COMPLETION_LENGTH = 4
SCAN_CHUNK = 32  # prompts per exact-accuracy forward while looking for prompts with signal
FINGERPRINT_DIMS = 8  # random directions each g is projected on, to find variants whose g coincide
COINCIDE_RTOL = 1e-4  # |projection difference| <= rtol * |g| on every batch: the same estimate
ROUNDING = 1e-8  # a squared relative bias this small is rounding (float32 gradients), not a measurement
POLICIES = ("reference", "mid")


# ------------------------------------------------------------------------------------------------------------------
# the metrics: pure functions of the K estimates and the exact gradient

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


# ------------------------------------------------------------------------------------------------------------------
# prompts, rewards, the exact target


def load_policy(path: str | Path) -> tuple[nn.Module, Any]:
    """A policy directory loaded as train_grpo.py loads it (eval mode: no dropout in tiny_lm anyway)."""
    from train_grpo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(str(path), "model_name_or_path")
    return model.eval(), tok


def encode(tok: Any, prompts: list[str]) -> tuple[Tensor, Tensor]:
    from ..prompts import left_pad

    return left_pad(tok(prompts)["input_ids"], tok.pad_token_id)


def exact_result(
    model: nn.Module, tok: Any, space: CompletionSpace, prompts: list[str], answers: list[str], grad: bool
) -> ExactResult:
    """tinygrpo.exact's J (and gradient) for these prompts under the `accuracy` reward, scored as the trainer does."""
    from ..exact import exact_objective, score_completions

    R = score_completions(tok, prompts, space, ["accuracy"], columns={"answer": answers})
    if not bool(torch.isfinite(R).all()):
        raise ValueError("the accuracy reward returned None for some completion")
    ids, mask = encode(tok, prompts)
    return exact_objective(model, ids, mask, space, R, grad=grad)


def pass_at_k_gradient(per_prompt: Tensor, accuracy: Tensor, k: int) -> Tensor:
    """The exact gradient of the pass@k objective mean_x [1 - (1 - acc(x))^k]: mean_x k (1 - acc(x))^(k-1) grad acc(x)
    (the chain rule on each prompt's exact accuracy and its gradient, (P, D) and (P,))."""
    return (k * (1 - accuracy) ** (k - 1) @ per_prompt) / per_prompt.size(0)


def answer_of(prompt: str) -> str:
    """The gold answer of an "a+b=" prompt (tinygrpo.problems.make_row's format)."""
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b))


def select_prompts(
    model: nn.Module,
    tok: Any,
    space: CompletionSpace,
    rows: list[dict],
    P: int,
    lo: float,
    hi: float,
    seed: int,
) -> dict[str, Any]:
    """The first P prompts, in an order shuffled with `seed`, whose exact expected accuracy is in [lo, hi]; also the
    accuracies of every prompt scanned on the way."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    chosen: list[tuple[int, float]] = []
    scanned: list[float] = []
    for start in range(0, len(order), SCAN_CHUNK):
        idx = order[start : start + SCAN_CHUNK]
        prompts = [rows[i]["prompt"] for i in idx]
        acc = exact_result(model, tok, space, prompts, [rows[i]["answer"] for i in idx], grad=False).accuracy
        for i, a in zip(idx, acc.tolist(), strict=True):
            scanned.append(a)
            if lo <= a <= hi and len(chosen) < P:
                chosen.append((i, a))
        if len(chosen) >= P:
            break
    if not chosen:
        raise ValueError(f"no validation prompt has an exact accuracy in [{lo}, {hi}]")
    s = np.array(scanned)
    return {
        "prompts": [rows[i]["prompt"] for i, _ in chosen],
        "answers": [rows[i]["answer"] for i, _ in chosen],
        "accuracy": [a for _, a in chosen],
        "scanned": len(scanned),
        "scanned_below": int((s < lo).sum()),
        "scanned_above": int((s > hi).sum()),
    }


@dataclass
class Draw:
    """One sampled batch: G completions of each prompt, rows grouped by prompt, and their rewards."""

    completion_ids: Tensor  # (P*G, Tc)
    completion_mask: Tensor  # (P*G, Tc) float
    lengths: Tensor  # (P*G,) tokens, EOS included
    rewards: Tensor  # (P*G,) float32, as the trainer's


class Sampler:
    """Draws batches as tinygrpo/generation.py does: sample_completions, decode with <eos> kept, the reward."""

    def __init__(self, model: nn.Module, tok: Any, prompts: list[str], answers: list[str], T: int) -> None:
        from rewards import EOS, resolve_rewards

        from ..backend import select_backend

        self.model, self.tok, self.T = model, tok, T
        self.backend = select_backend(model)  # the trainer's choice: the grouped fast path for tiny_lm
        self.ids, self.mask = encode(tok, prompts)
        self.prompts, self.answers = prompts, answers
        self.funcs, self.names, self.weights = resolve_rewards(["accuracy"], None)
        self.kwargs = {"max_completion_length": T, "eos": EOS}
        self.cache: dict = {}

    def draw(self, G: int, generator: torch.Generator) -> Draw:
        from rewards import combine_rewards, compute_rewards

        from ..rollout import decode_rows, sample_completions

        tok = self.tok
        ro = sample_completions(
            self.model,
            self.ids,
            self.mask,
            G,
            self.T,
            tok.eos_token_id,
            tok.pad_token_id,
            1.0,
            generator=generator,
            backend=self.backend,
        )
        lengths = ro.completion_mask.sum(1)
        rows = [r[:n] for r, n in zip(ro.completion_ids.tolist(), lengths.tolist(), strict=True)]
        texts = decode_rows(tok, rows, self.cache)
        prompts = [p for p in self.prompts for _ in range(G)]
        answers = {"answer": [a for a in self.answers for _ in range(G)]}
        per_func = compute_rewards(self.funcs, self.names, prompts, texts, rows, answers, self.kwargs)
        rewards = torch.from_numpy(
            combine_rewards(per_func.astype(np.float32), self.weights).astype(np.float32)
        )
        return Draw(ro.completion_ids.clone(), ro.completion_mask.float(), lengths.clone(), rewards)


# ------------------------------------------------------------------------------------------------------------------
# one variant's estimate of one batch


def variant_config(name: str, G: int, P: int, T: int = MAX_COMPLETION_LENGTH) -> GRPOConfig:
    """The GRPOConfig of a variant for P prompts x G completions in one on-policy mini-batch."""
    from ..config import GRPOConfig

    return GRPOConfig(
        num_generations=G,
        per_device_train_batch_size=P * G,
        max_completion_length=T,
        temperature=1.0,
        reward_funcs=["accuracy"],
        **VARIANTS[name].overrides,
    )


def one_process() -> Processes:
    """tinygrpo.distributed.Processes for this process alone (every collective is the identity)."""
    from accelerate import Accelerator

    from ..distributed import Processes

    return Processes(Accelerator(cpu=True))


class Estimator:
    """A variant's gradient estimate of a batch, through the trainer's own PolicyUpdate (prepare, then loss)."""

    def __init__(self, cfg: GRPOConfig, model: nn.Module, sampler: Sampler, processes: Processes) -> None:
        from ..backend import PolicyForward
        from ..update import PolicyUpdate

        self.cfg, self.sampler = cfg, sampler
        self.params = list(model.parameters())
        # No optimizer: only prepare() and loss() are used, never a step.
        self.update = PolicyUpdate(
            cfg, PolicyForward(model, sampler.backend), model, None, sampler.backend, None, processes
        )

    def batch(self, draw: Draw):
        """The trainer's Batch of a draw, with this variant's advantages (over the whole batch, as the trainer's)."""
        from ..advantage_estimators import advantages
        from ..batch import Batch

        cfg = self.cfg
        adv, _ = advantages(
            draw.rewards,
            cfg.num_generations,
            mode=cfg.advantage_mode,
            scale_rewards=cfg.scale_rewards,
            lengths=draw.lengths,
            k=cfg.train_pass_k,
        )
        s = self.sampler
        return Batch(s.ids, s.mask, draw.completion_ids, draw.completion_mask, adv, draw.rewards)

    def gradient(self, draw: Draw) -> Tensor:
        """-d loss / d theta, flat in model.parameters() order (float64); 0 when no group has signal (no step)."""
        (mb,) = self.update.prepare(self.batch(draw))
        if mb.active_groups == 0:
            return torch.zeros(sum(p.numel() for p in self.params), dtype=torch.float64)
        loss, _ = self.update.loss(mb)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        flat = [
            torch.zeros(p.numel()) if d is None else d.reshape(-1)
            for p, d in zip(self.params, grads, strict=True)
        ]
        return -torch.cat(flat).double()


# ------------------------------------------------------------------------------------------------------------------
# the study


def ensure_mid(out: Path, reference: Path, steps: int) -> Path:
    """OUTPUT_DIR/policy-mid/final: `steps` steps of train_grpo.py's default recipe from the reference (trained when
    missing or trained for another number of steps)."""
    run = out / "policy-mid"
    final = run / "final"
    cfg_path = run / "config.json"
    done = (final / "config.json").is_file() and cfg_path.is_file()
    if done and json.loads(cfg_path.read_text()).get("max_steps") == steps:
        return final
    print(
        f"training the mid policy: {steps} steps of train_grpo.py from {reference} into {run} ...", flush=True
    )
    t0 = time.perf_counter()
    rc = train(run, 42, steps, str(reference), ["--max_steps", str(steps)])
    if rc != 0:
        raise SystemExit(f"error: training the mid policy failed (exit {rc}); see {log_path(run)}")
    print(f"  done in {time.perf_counter() - t0:.0f} s", flush=True)
    return final


def study_policy(name: str, path: Path, args: argparse.Namespace, processes: Any) -> dict[str, Any]:
    """Every (variant, G) cell of one policy."""
    from ..exact import completion_space
    from ..problems import load_split

    t0 = time.perf_counter()
    model, tok = load_policy(path)
    T = args.max_completion_length
    space = completion_space(model.config.vocab_size, tok.eos_token_id, tok.pad_token_id, T)
    if args.prompts:
        answers = [answer_of(p) for p in args.prompts]
        acc = exact_result(model, tok, space, args.prompts, answers, grad=False).accuracy.tolist()
        chosen = {"prompts": list(args.prompts), "answers": answers, "accuracy": acc, "scanned": len(acc)}
    else:
        rows = load_split("addition", "validation").to_list()
        chosen = select_prompts(model, tok, space, rows, args.num_prompts, *args.accuracy_range, args.seed)
    prompts, answers = chosen["prompts"], chosen["answers"]
    P = len(prompts)
    print(
        f"{name}: {P} prompts (scanned {chosen['scanned']}), exact accuracy "
        f"{', '.join(f'{a:.2f}' for a in chosen['accuracy'])}",
        flush=True,
    )
    # Each prompt's exact gradient (g* is their mean): to tell a bias that reweighs prompts from one within them.
    per = [
        exact_result(model, tok, space, [p], [a], grad=True) for p, a in zip(prompts, answers, strict=True)
    ]
    per_prompt = torch.stack([r.grad for r in per])  # (P, D)
    g_star = per_prompt.mean(0)
    J = float(np.mean([r.J for r in per]))
    acc = torch.tensor([float(r.accuracy[0]) for r in per], dtype=torch.float64)
    targets = {"J": g_star, "pass@k": pass_at_k_gradient(per_prompt, acc, PASS_K)}
    setup_s = time.perf_counter() - t0
    print(f"  J = {J:.4f}, |g*| = {float(g_star.norm()):.4g} ({setup_s:.0f} s)", flush=True)

    sampler = Sampler(model, tok, prompts, answers, T)
    D = g_star.numel()
    cells: dict[str, dict[str, dict]] = {v: {} for v in args.variants}
    sampled: dict[str, list[float]] = {}
    prints: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}  # G -> variant -> fingerprint
    for G in args.G:
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + G)
        draws = [sampler.draw(G, gen) for _ in range(args.batches)]
        means = torch.stack([d.rewards.double().mean() for d in draws])
        sampled[str(G)] = [float(means.mean()), float(means.std() / math.sqrt(len(draws)))]
        prints[str(G)] = {}
        for v in args.variants:
            if VARIANTS[v].min_G > G:  # (pass_at_k needs k < G)
                continue
            t1 = time.perf_counter()
            est = Estimator(variant_config(v, G, P, T), model, sampler, processes)
            X = torch.empty(len(draws), D, dtype=torch.float64)
            for k, d in enumerate(draws):
                X[k] = est.gradient(d)
            m = estimator_metrics(X, g_star, per_prompt)
            if VARIANTS[v].target != "J":  # also against the gradient of the objective it is built for
                m["own_target"] = {
                    "name": VARIANTS[v].target,
                    **estimator_metrics(X, targets[VARIANTS[v].target]),
                }
            m["completions_per_batch"] = P * G
            m["seconds"] = time.perf_counter() - t1
            cells[v][str(G)] = m
            prints[str(G)][v] = fingerprint(X)
            print(
                f"  {name} G={G:>2} {v:>21}: cos(mean) {m['cos_mean']:.3f} ± {m['cos_mean_se']:.3f}  "
                f"mean cos {m['mean_cos']:.3f}  alpha {m['alpha']:.3g}  rel var {m['rel_var']:.3g}  "
                f"({m['seconds']:.1f} s)",
                flush=True,
            )
    return {
        "path": shown(path),
        **chosen,
        "J": J,
        "pass_at_k_objective": float((1 - (1 - acc) ** PASS_K).mean()),
        "grad_norm": float(g_star.norm()),
        "num_params": D,
        "sampled_reward": sampled,  # G -> [mean reward over the K batches, its standard error]
        "coincide": coinciding_groups(prints, args.variants),
        "cells": cells,
        "seconds": time.perf_counter() - t0,
    }


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


# ------------------------------------------------------------------------------------------------------------------
# the docs


def _fmt(x: float | None, digits: int = 3, kind: str = "f") -> str:
    """A number for the tables; "-" for an undefined one (null in the JSON)."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}{kind}}"


def _or(x: float | None, default: float) -> float:
    return default if x is None else x


def _ratio(x: float | None, se: float | None) -> float:
    """x / se, NaN when either is undefined or the SE is 0."""
    return x / se if x is not None and se else math.nan


def _z(a: dict, b: dict, key: str) -> float:
    """(a - b) / sqrt(se_a^2 + se_b^2): the samples being shared is ignored (the z is then conservative when the
    two estimates move together, as variants on the same batches do)."""
    if None in (a[key], b[key], a[f"{key}_se"], b[f"{key}_se"]):
        return math.nan
    return _ratio(a[key] - b[key], math.hypot(a[f"{key}_se"], b[f"{key}_se"]))


def _table(res: dict, policy: str, fmt) -> list[str]:
    """Rows: variants; columns: G (completions per batch)."""
    pol = res["policies"][policy]
    Gs = res["setup"]["G"]
    lines = ["| variant | " + " | ".join(f"G={G} ({G * len(pol['prompts'])})" for G in Gs) + " |"]
    lines.append("|---|" + "---|" * len(Gs))
    for v in res["setup"]["variants"]:
        row = [fmt(pol["cells"][v][str(G)]) if str(G) in pol["cells"][v] else "" for G in Gs]
        lines.append(f"| {v} | " + " | ".join(row) + " |")
    return lines


def _bias_cell(m: dict) -> str:
    """The relative bias ± SE where its square is more than 2 SE above 0, else an upper bound: the root of its
    square + 2 SE."""
    b2, se = m["rel_bias2"], m["rel_bias2_se"]
    if b2 is None or se is None:
        return "-"
    if b2 > 2 * se:
        return f"{math.sqrt(b2):.2f} ± {se / (2 * math.sqrt(b2)):.2f}"
    return f"< {math.sqrt(max(b2 + 2 * se, 0.0)):.2f}"


def _series(cells: dict, v: str, key: str, Gs: list[str], digits: int = 2) -> str:
    return ", ".join(_fmt(cells[v][G][key], digits) for G in Gs if G in cells[v])


WEIGHT_VARIANTS = ("grpo", "dapo", "dr_grpo", "pass_at_k")  # whose prompt weights the docs show


@dataclass
class _Policy:
    """One policy's results as the 'what it shows' bullets read them."""

    pol: dict  # the JSON's policies[name]
    T: int  # max completion length
    Gs: list[str]  # every G of the run, as the JSON's keys

    @property
    def cells(self) -> dict[str, dict[str, dict]]:
        return self.pol["cells"]

    @property
    def acc(self) -> np.ndarray:
        return np.array(self.pol["accuracy"])

    def has(self, *variants: str) -> bool:
        return all(v in self.cells for v in variants)

    def series(self, v: str, key: str, digits: int = 2, Gs: list[str] | None = None) -> str:
        return _series(self.cells, v, key, self.Gs if Gs is None else Gs, digits)


def _identical(p: _Policy) -> str | None:
    if not p.pol["coincide"]:
        return None
    groups = "; ".join(" = ".join(g) for g in p.pol["coincide"])
    return (
        f"Identical estimates: {groups} give the same g on every batch (to {COINCIDE_RTOL:g} of |g|). On the "
        "on-policy batch the ratio is exactly 1, and these surrogates differ only where it is not."
    )


def _controls(p: _Policy) -> str | None:
    exact = {
        "reinforce": lambda G: 1 / p.T,
        "rloo": lambda G: 1 / p.T,
        "dr_grpo": lambda G: (1 - 1 / G) / p.T,
    }
    controls = [v for v in exact if v in p.cells]
    if not controls:
        return None
    cells = [(f"{v} G={G}", c, exact[v](int(G))) for v in controls for G, c in p.cells[v].items()]
    zs = {k: _ratio(c["rel_bias2"], c["rel_bias2_se"]) for k, c, _ in cells}
    dev = {k: _ratio(c["alpha"] - a, c["alpha_se"]) for k, c, a in cells if c["alpha"] is not None}

    def count(z: dict[str, float]) -> str:
        far = [f"{k} ({x:.1f} SE)" for k, x in z.items() if not abs(x) <= 3]
        tail = f"not in {', '.join(far)}" if far else f"largest |z| {np.nanmax(np.abs(list(z.values()))):.1f}"
        return f"in {len(z) - len(far)} of {len(z)} cells ({tail})"

    line = (
        f"Controls: {', '.join(controls)} are unbiased in direction by construction. Their squared relative bias is "
        f"within 3 SE of 0 {count(zs)}; their scale alpha is within 3 SE of its exact value (1/T = {1 / p.T:g} for "
        f"reinforce and rloo, (1 - 1/G)/T for dr_grpo) {count(dev)}."
    )
    if all(abs(x) <= 3 for x in [*zs.values(), *dev.values()]):
        return line + " The sampled estimates and the exact gradient agree where theory says they must."
    return line + (
        " (For an unbiased estimator the squared bias is a degenerate U-statistic: a |z| near 3 in one such cell "
        "is weak evidence.)"
    )


def _dr_grpo_claim(p: _Policy) -> str | None:
    if not p.has("grpo", "dr_grpo"):
        return None
    zs = [_z(p.cells["grpo"][G], p.cells["dr_grpo"][G], "rel_bias2") for G in p.Gs]
    sig = [G for G, z in zip(p.Gs, zs, strict=True) if z > 3]
    verdict = (
        f"grpo's direction is measurably more biased than dr_grpo's at G = {', '.join(sig)}"
        if sig
        else "at no G is grpo's direction measurably (3 SE) more biased than dr_grpo's"
    )
    line = (
        f"Dr. GRPO's claim: relative bias |E g - alpha g*| / |alpha g*| of grpo {p.series('grpo', 'rel_bias')} "
        f"against dr_grpo's {p.series('dr_grpo', 'rel_bias')} at G = {', '.join(p.Gs)} (cos(mean) "
        f"{p.series('grpo', 'cos_mean', 3)} against {p.series('dr_grpo', 'cos_mean', 3)}); the squared biases "
        f"differ by {', '.join(f'{z:.1f}' for z in zs)} SE: {verdict}."
    )
    if p.has("dapo"):
        line += (
            " dapo, the same z-score advantages without grpo's per-sequence length normalisation, has "
            f"{p.series('dapo', 'rel_bias')}."
        )
    return line


def _where(p: _Policy) -> str | None:
    """Out of the prompts' span (within prompts) or in it (a reweighting of prompts)."""
    hidden = {v for g in p.pol["coincide"] for v in g[1:]}  # (a variant that coincides with one before it)
    # A cell whose estimates lie in the span up to rounding (reinforce's) has a z that means nothing.
    spans = [
        (v, G, c["rel_bias2_out"], c["rel_bias2_out_se"])
        for v, by_G in p.cells.items()
        for G, c in by_G.items()
        if v not in hidden and c.get("rel_bias2_out") is not None and abs(c["rel_bias2_out"]) > ROUNDING
    ]
    if not spans:
        return None
    exact_in = [
        v
        for v, by_G in p.cells.items()
        if all(abs(_or(c.get("rel_bias2_out"), 1)) <= ROUNDING for c in by_G.values())
    ]
    v, G, top, se = max(spans, key=lambda x: abs(_ratio(x[2], x[3])) if x[3] else -math.inf)
    z = abs(_ratio(top, se))
    Gmax = p.Gs[-1]
    inside = [
        f"{w}'s {_fmt(p.cells[w][Gmax]['rel_bias2_in'], 3, 'g')} ± {_fmt(p.cells[w][Gmax]['rel_bias2_in_se'], 2, 'g')}"
        for w in ("grpo", "dapo")
        if w in p.cells and Gmax in p.cells[w]
    ]
    return (
        f"Where the bias lies: outside the span of the {len(p.acc)} prompts' exact gradients the squared relative "
        f"bias is within {z:.1f} SE of 0 in every cell (the largest: {v}, G={G}, {_fmt(top, 2, 'g')} ± "
        f"{_fmt(se, 2, 'g')}, a relative bias of {math.sqrt(max(top, 0.0)):.3f})"
        + (f"; inside it, at G={Gmax}, " + " and ".join(inside) if inside else "")
        + ". "
        + (
            "What bias there is reweights the prompts; a bias within a prompt (it would leave the span, e.g. a pull "
            "towards short or long completions) is not measurable here."
            if z < 3
            else "Part of the bias lies within prompts (it leaves the span: e.g. a pull towards short or long "
            "completions)."
        )
        + (f" ({', '.join(exact_in)}: in the span up to rounding.)" if exact_in else "")
    )


def _which_prompts(p: _Policy) -> str | None:
    Gmax, acc = p.Gs[-1], p.acc
    w = {
        v: np.array(p.cells[v][Gmax]["prompt_weights"], dtype=float)
        for v in ("dapo", "grpo")
        if v in p.cells and p.cells[v].get(Gmax, {}).get("prompt_weights")
    }
    if not w or not np.all((acc > 0) & (acc < 1)):
        return None
    inv_std = 1 / np.sqrt(acc * (1 - acc))
    parts = [
        f"{v}'s from {x.min():.2f} to {x.max():.2f}, correlation {np.corrcoef(x, inv_std)[0, 1]:.2f}"
        for v, x in w.items()
    ]
    line = (
        f"Which prompts: at G={Gmax}, the weights E g puts on the prompts' gradients, relative to J's (all 1 for an "
        f"unbiased direction), run {'; '.join(parts)} with 1/sqrt(acc (1 - acc)), the std of the prompt's reward "
        "(the table below)."
    )
    n_tok = np.array([len(a) + 1 for a in p.pol["answers"]])  # the right answer's tokens, EOS included
    if "grpo" in w and "dapo" in w and len(set(n_tok)) > 1:
        ratio = w["grpo"] / w["dapo"]
        by_len = ", ".join(
            f"{ratio[n_tok == n].mean():.2f} where the right answer is {n} tokens ({int((n_tok == n).sum())})"
            for n in sorted(set(n_tok))
        )
        line += (
            f" grpo's weight over dapo's (what grpo's division by the sequence's length adds): {by_len}: here the "
            "length normalisation, too, acts as a reweighting of prompts."
        )
    return line


def _pass_at_k(p: _Policy) -> str | None:
    c = p.cells.get("pass_at_k", {})
    dead = [G for G in p.Gs if G in c and c[G]["zero_frac"] == 1]
    own = [G for G in p.Gs if G in c and "own_target" in c[G] and G not in dead]
    if not own:
        return None
    line = (
        f"pass_at_k: cos(mean) with g* {p.series('pass_at_k', 'cos_mean', 3, own)} at G = {', '.join(own)}, but "
        f"with the exact gradient of the pass@{PASS_K} objective "
        + ", ".join(
            f"{_fmt(c[G]['own_target']['cos_mean'], 3)} ± {_fmt(c[G]['own_target']['cos_mean_se'], 3)}"
            for G in own
        )
        + ": it estimates the objective it is built for."
    )
    if dead:
        line += f" At G = {', '.join(dead)} every batch gives g = 0 (a group's pass@k estimate is 0 or 1: no signal)."
    return line


def _one_step(p: _Policy) -> str | None:
    if not p.has("dr_grpo"):
        return None
    c = p.cells["dr_grpo"]
    best = {
        G: max((v for v in p.cells if G in p.cells[v]), key=lambda v: p.cells[v][G]["mean_cos"]) for G in p.Gs
    }
    return (
        f"One step: dr_grpo's mean cos(g_k, g*) is {p.series('dr_grpo', 'mean_cos')} at G = {', '.join(p.Gs)} "
        f"(relative variance {', '.join(_fmt(c[G]['rel_var'], 3, 'g') for G in p.Gs)}; batches with no step "
        f"{p.series('dr_grpo', 'zero_frac')}). The highest mean cos at each G: "
        + ", ".join(f"{best[G]} ({_fmt(p.cells[best[G]][G]['mean_cos'])})" for G in p.Gs)
        + "."
    )


def _no_baseline(p: _Policy) -> str | None:
    if not p.has("reinforce", "dr_grpo"):
        return None
    r, d = p.cells["reinforce"], p.cells["dr_grpo"]
    lower = [G for G in p.Gs if _or(r[G]["rel_var"], math.inf) < _or(d[G]["rel_var"], -math.inf)]
    return (
        f"No baseline: reinforce's relative variance is below dr_grpo's at G = {', '.join(lower) or 'none'} "
        f"({p.series('reinforce', 'rel_var')} against {p.series('dr_grpo', 'rel_var')}), with batches with no step "
        f"{p.series('reinforce', 'zero_frac')} against {p.series('dr_grpo', 'zero_frac')} (its advantage is the "
        "reward: any right answer gives a step)."
    )


def _scale(p: _Policy) -> str | None:
    if not p.has("grpo", "dr_grpo"):
        return None
    ratio = [_ratio(p.cells["grpo"][G]["alpha"], p.cells["dr_grpo"][G]["alpha"]) for G in p.Gs]
    return (
        f"Scale: grpo's alpha is {', '.join(f'{r:.1f}' for r in ratio)} times dr_grpo's at G = {', '.join(p.Gs)} "
        "(the division by the group std and by the sequence's own length instead of T)."
    )


BULLETS = (
    _identical,
    _controls,
    _dr_grpo_claim,
    _where,
    _which_prompts,
    _pass_at_k,
    _one_step,
    _no_baseline,
    _scale,
)


def findings(res: dict) -> dict[str, list[str]]:
    """The 'what it shows' bullets of each policy: every number in them measured, each sentence chosen by them."""
    T, Gs = res["setup"]["max_completion_length"], [str(G) for G in res["setup"]["G"]]
    out = {}
    for policy, pol in res["policies"].items():
        p = _Policy(pol, T, Gs)
        out[policy] = [line for bullet in BULLETS if (line := bullet(p)) is not None]
    return out


def write_markdown(res: dict, path: Path) -> None:
    s = res["setup"]
    Gmax = str(s["G"][-1])
    lines = [
        "# What each estimator estimates",
        "",
        f"Generated by `{res['command']}` in {res['seconds'] / 60:.1f} min, {s['threads']}. "
        f"K = {s['batches']} batches per (policy, G), every variant on the same batches; completions of at most "
        f"{s['max_completion_length']} tokens at temperature 1; reward `accuracy`; one on-policy mini-batch (the "
        "trainer's first: the ratio is exactly 1); no dynamic sampling, no explore rounds. "
        "`tinygrpo/studies/estimators.py` says how each number is computed.",
        "",
        f"Policies: {s['policies']}",
        "",
        f"Prompts: {s['selection']}",
        "",
        "Variants (GRPOConfig overrides on the trainer's defaults):",
        "",
    ]
    for v in s["variants"]:
        ov = ", ".join(f"{k}={val}" for k, val in res["variants"][v]["overrides"].items())
        lines.append(f"- **{v}** (`{ov}`): {res['variants'][v]['what']}")
    lines += [
        "",
        "g is a batch's estimate (minus the gradient of the loss), g* the exact gradient of J. **cos(mean)**: the "
        "cosine of E g with g* (1: unbiased in direction), the Monte Carlo noise of the mean of K batches removed "
        "(U-statistics over pairs of batches; it can exceed 1 by noise). **mean cos**: the mean over batches of "
        "cos(g_k, g*), how well one step points (a batch with no group with signal takes no step: cosine 0). "
        "**relative bias**: |E g - alpha g*| / |alpha g*|. **alpha**: <E g, g*> / |g*|^2, the step's scale along "
        "g*. **relative variance**: E|g - E g|^2 / |E g|^2. **weights**: E g's least-squares coefficients on the "
        "prompts' exact gradients, divided by their mean (J weighs every prompt 1). ± are delete-one jackknife "
        "standard errors over the K batches (the standard error of the mean for mean cos). Column headers: G, and "
        "in brackets the completions per batch.",
        "",
        "## What it shows",
        "",
    ]
    for policy, bullets in findings(res).items():
        lines += [f"**{policy}**", "", *[f"- {x}" for x in bullets], ""]
    lines += ["![estimators](estimators.png)", ""]
    for policy, pol in res["policies"].items():
        lines += [f"## {policy}", ""]
        scan = (
            f" ({pol['scanned_below']} below the range, {pol['scanned_above']} above)"
            if pol.get("scanned_below") is not None
            else ""
        )
        lines += [
            f"`{pol['path']}`: J = {pol['J']:.4f} over its {len(pol['prompts'])} prompts (pass@{PASS_K}: "
            f"{pol['pass_at_k_objective']:.4f}), |g*| = {pol['grad_norm']:.4g}, {pol['num_params']:,} parameters; "
            f"{pol['scanned']} validation prompts scanned{scan}.",
            "",
        ]
        shown = [v for v in WEIGHT_VARIANTS if v in pol["cells"] and Gmax in pol["cells"][v]]
        lines += [
            "| prompt | answer | exact accuracy | "
            + " | ".join(f"{v} weight, G={Gmax}" for v in shown)
            + " |",
            "|---|---|---|" + "---|" * len(shown),
        ]
        for i, (p, a, acc) in enumerate(zip(pol["prompts"], pol["answers"], pol["accuracy"], strict=True)):
            ws = []
            for v in shown:
                c = pol["cells"][v][Gmax]
                w = c.get("prompt_weights")
                ws.append(f"{_fmt(w[i], 2)} ± {_fmt(c['prompt_weights_se'][i], 2)}" if w else "-")
            lines.append(f"| `{p}` | {a} | {acc:.3f} | " + " | ".join(ws) + " |")
        lines += ["", "cos(mean) / mean cos:", ""]
        lines += _table(res, policy, lambda m: f"{_fmt(m['cos_mean'])} / {_fmt(m['mean_cos'])}")
        lines += [
            "",
            "relative bias ± SE (< : the squared bias is within 2 SE of 0; the bound is its square + 2 SE):",
            "",
        ]
        lines += _table(res, policy, _bias_cell)
        lines += ["", "alpha / relative variance:", ""]
        lines += _table(res, policy, lambda m: f"{_fmt(m['alpha'], 3, 'g')} / {_fmt(m['rel_var'], 3, 'g')}")
        lines += ["", "fraction of batches with no step (no group with signal):", ""]
        lines += _table(res, policy, lambda m: _fmt(m["zero_frac"], 2))
        checks = ", ".join(f"G={G}: {mu:.4f} ± {se:.4f}" for G, (mu, se) in pol["sampled_reward"].items())
        lines += [
            "",
            f"Check: the mean reward of the sampled batches ({checks}) against the exact J = {pol['J']:.4f}.",
            "",
        ]
    path.write_text("\n".join(lines))


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(res["policies"])
    Gmax = str(res["setup"]["G"][-1])
    fig, axes = plt.subplots(3, len(policies), figsize=(7 * len(policies), 13), squeeze=False)
    for j, policy in enumerate(policies):
        pol = res["policies"][policy]
        P = len(pol["prompts"])
        # one line per group of coinciding variants
        hidden = {v for g in pol["coincide"] for v in g[1:]}
        label = {g[0]: " = ".join(g) for g in pol["coincide"]}
        style = {}
        for i, v in enumerate(res["setup"]["variants"]):
            style[v] = dict(color=plt.cm.tab20(i % 20), marker="os^vD<>ph*"[i % 10])
            if v in hidden:
                continue
            cells = pol["cells"][v]
            Gs = [int(G) for G in cells]
            # A variant built for another objective is drawn, in the second row, against that objective's gradient
            # (against g* it is far off the scale of the others; the table has it).
            own = all("own_target" in c for c in cells.values())
            for ax, key, by in ((axes[0, j], "mean_cos", False), (axes[1, j], "cos_mean", own)):
                # (a statistic that is undefined, null in the JSON, is left out of the line)
                ms = [c["own_target"] if by else c for c in cells.values()]
                y = [math.nan if m[key] is None else m[key] for m in ms]
                err = [math.nan if m[f"{key}_se"] is None else m[f"{key}_se"] for m in ms]
                name = label.get(v, v) + (
                    f" (against the {cells[next(iter(cells))]['own_target']['name']} gradient)" if by else ""
                )
                ax.errorbar(Gs, y, yerr=err, label=name, capsize=2, ls="--" if by else "-", **style[v])
        for ax in axes[:2, j]:
            ax.set_xscale("log", base=2)
            ax.set_xlabel(f"G (completions per batch = {P} x G)")
            ax.grid(alpha=0.3)
        axes[0, j].set_title(f"{policy}: one step, mean cos(g_k, g*)")
        axes[0, j].set_ylabel("mean per-batch cosine with the exact gradient")
        axes[1, j].set_title(f"{policy}: direction of the expected step, cos(E g, g*)")
        axes[1, j].set_ylabel("cos(E g, g*) (noise-corrected) ± jackknife SE")
        axes[0, j].legend(fontsize=7)
        axes[1, j].legend(fontsize=7)
        ax = axes[2, j]
        acc = np.array(pol["accuracy"])
        order = np.argsort(acc)
        for v in WEIGHT_VARIANTS:
            c = pol["cells"].get(v, {}).get(Gmax)
            if c and c.get("prompt_weights"):
                w, se = (
                    np.array(c["prompt_weights"], dtype=float),
                    np.array(c["prompt_weights_se"], dtype=float),
                )
                ax.errorbar(acc[order], w[order], yerr=se[order], label=v, capsize=2, **style[v])
        if np.all((acc > 0) & (acc < 1)):
            inv_std = 1 / np.sqrt(acc * (1 - acc))
            ax.plot(
                acc[order],
                (inv_std / inv_std.mean())[order],
                "k--",
                lw=1,
                label="1/std of the reward (scaled)",
            )
        ax.axhline(1, color="grey", lw=0.8)
        ax.set_xlabel("the prompt's exact accuracy")
        ax.set_ylabel("weight of the prompt in E g, relative to J")
        ax.set_title(f"{policy}: how E g weighs the prompts, G={Gmax}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_docs(res: dict, docs: Path) -> None:
    docs.mkdir(parents=True, exist_ok=True)
    write_markdown(res, docs / "estimators.md")
    plot(res, docs / "estimators.png")
    print(f"wrote {docs / 'estimators.md'} and {docs / 'estimators.png'}")


# ------------------------------------------------------------------------------------------------------------------
# the command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--policies", nargs="+", default=list(POLICIES), choices=POLICIES, help="Policies to study."
    )
    p.add_argument(
        "--model_name_or_path", default=None, help="Study this policy directory instead of --policies."
    )
    p.add_argument(
        "--reference", default=str(REPO / "checkpoints" / "reference"), help="The reference policy."
    )
    p.add_argument("--mid_steps", type=int, default=MID_STEPS, help="Training steps of the mid policy (60).")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--G", nargs="+", type=int, default=DEFAULT_G, help="Group sizes (default 2 4 8 16 32).")
    p.add_argument("--batches", type=int, default=DEFAULT_BATCHES, help="K: batches per (policy, G) (200).")
    p.add_argument("--num_prompts", type=int, default=DEFAULT_PROMPTS, help="P: prompts per batch (12).")
    p.add_argument("--accuracy_range", nargs=2, type=float, default=list(DEFAULT_RANGE), metavar=("LO", "HI"))
    p.add_argument("--prompts", nargs="+", default=None, help="Use these a+b= prompts instead of selecting.")
    p.add_argument("--max_completion_length", type=int, default=MAX_COMPLETION_LENGTH)
    p.add_argument("--seed", type=int, default=0, help="Prompt order and batch sampling seed (0).")
    p.add_argument("--output_dir", default="runs/estimators")
    p.add_argument("--docs", default=None, help="Write estimators.md and estimators.png here (e.g. docs).")
    p.add_argument(
        "--rewrite_docs", action="store_true", help="Run nothing: docs again from OUTPUT_DIR/estimators.json."
    )
    args = p.parse_args(argv)
    if args.batches < 3 or args.num_prompts < 1 or min(args.G) < 2:
        p.error("--batches must be >= 3, --num_prompts >= 1, every G >= 2")
    args.G = sorted(set(args.G))
    args.variants = [v for v in VARIANTS if v in args.variants]
    return args


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(raw)
    out = Path(args.output_dir)
    if args.rewrite_docs:
        if not args.docs:
            print("error: --rewrite_docs needs --docs", file=sys.stderr)
            return 1
        write_docs(json.loads((out / "estimators.json").read_text()), Path(args.docs))
        return 0
    torch.set_num_threads(1)  # why: tinygrpo/studies/_runs.py (one thread per run)
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    if args.model_name_or_path:
        paths = {Path(args.model_name_or_path).name: Path(args.model_name_or_path)}
    else:
        paths = {}
        for name in args.policies:
            ref = Path(args.reference)
            paths[name] = ref if name == "reference" else ensure_mid(out, ref, args.mid_steps)
    processes = one_process()
    lo, hi = args.accuracy_range
    selection = (
        f"the given prompts {' '.join(args.prompts)}"
        if args.prompts
        else f"the `validation` split of data/addition shuffled with random.Random({args.seed}), scanned in chunks "
        f"of {SCAN_CHUNK}; the first P = {args.num_prompts} prompts whose exact expected accuracy (tinygrpo/exact.py, "
        f"every completion enumerated) is in [{lo}, {hi}], chosen for each policy separately."
    )
    res: dict[str, Any] = {
        "command": "python -m tinygrpo.studies.estimators" + (" " + shlex.join(raw) if raw else ""),
        "setup": {
            "G": args.G,
            "batches": args.batches,
            "variants": args.variants,
            "max_completion_length": args.max_completion_length,
            "accuracy_range": [lo, hi],
            "seed": args.seed,
            "selection": selection,
            "mid_steps": args.mid_steps,
            "threads": "one thread (torch.set_num_threads(1))",
            "policies": describe_policies(paths, args),
        },
        "variants": {
            v: {"overrides": VARIANTS[v].overrides, "what": VARIANTS[v].what} for v in args.variants
        },
        "policies": {},
    }
    for name, path in paths.items():
        res["policies"][name] = study_policy(name, path, args, processes)
    res["seconds"] = time.perf_counter() - t0
    (out / "estimators.json").write_text(json.dumps(_finite(res), indent=1, allow_nan=False))
    print(f"wrote {out / 'estimators.json'} ({res['seconds']:.0f} s)")
    if args.docs:
        write_docs(json.loads((out / "estimators.json").read_text()), Path(args.docs))
    return 0


def shown(path: str | Path) -> str:
    """A path as the docs show it: relative to the repository when inside it (no machine's absolute paths)."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def describe_policies(paths: dict[str, Path], args: argparse.Namespace) -> str:
    said = []
    for name, path in paths.items():
        if name == "mid" and not args.model_name_or_path:
            said.append(
                f"`mid` = {args.mid_steps} steps of `train_grpo.py`'s default recipe from the reference, as the "
                "studies run it (tinygrpo/studies/_runs.py: one thread, `train_without_validation`, seed 42), its "
                "`final` policy"
            )
        else:
            said.append(f"`{name}` = `{shown(path)}`")
    return "; ".join(said) + "."


def _finite(x: Any) -> Any:
    """The results with NaN / inf (an undefined statistic, e.g. no batch with signal) as null: strict JSON."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(x) else None
    return x


if __name__ == "__main__":
    sys.exit(main())
