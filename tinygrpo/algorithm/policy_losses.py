"""The policy-loss variants beside PPO's clip (tinygrpo.algorithm.core.clipped_surrogate), and the token masks some add.

Each maps the policy's log-probs of the sampled tokens, the old policy's, the advantages and the completion mask to a
(B, T) per-token loss (minimised), with TRL's definitions where TRL has the variant and verl's for GMPO:

    cispo   -sg(min(r, eps_high)) * A * log pi                   MiniMax-M1 (2025): clip the weight, not the update
    sapo    -sigmoid(tau (r - 1)) * 4 / tau * A                  SAPO (Gao et al. 2025): a soft, smooth trust region
    vespo   -sg(phi(w)) * A * log pi, phi(w) = e^l w^k e^(-l w)   VESPO (2026): a Gamma weight of the sequence ratio w
    gmpo    -A * exp(mean_t clip(log r_t)), per sequence          GMPO (Zhao et al. 2025): geometric mean of ratios

r = pi / pi_old per token, or GSPO's length-normalised sequence ratio (importance_sampling_level "sequence"); sg =
stop-gradient. On-policy (old_logp None: r is exactly 1 in value) every variant's gradient is a multiple of the
plain policy gradient -A grad log pi: 1 for sapo, vespo and gmpo, min(1, eps_high) for cispo.

The masks: `off_policy_mask` (DeepSeek-V3.2's off-policy sequence masking) and `high_entropy_mask` (train only on
the highest-entropy tokens, Wang et al. 2025). Shapes as in tinygrpo.algorithm.core: B completions, T tokens, (B,) advantages.

The registry: every loss type is one function of one signature, registered by name with the aggregation that
reduces its per-token loss (as verl's `register_policy_loss`):

    @register_policy_loss("my_loss", aggregation="dapo")
    def my_loss(logp, old_logp, advantages, mask, cfg: LossConfig) -> (per_token_loss (B, T), stats)

`grpo_loss` (tinygrpo/update/loss.py) looks the loss type up in POLICY_LOSSES; `loss_type` accepts every registered name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from tinygrpo.algorithm.core import AGGREGATIONS, clipped_surrogate, log_importance_weights
from tinygrpo.algorithm.loss_config import LossConfig

PolicyLossFn = Callable[[Tensor, Tensor | None, Tensor, Tensor, LossConfig], tuple[Tensor, dict[str, Tensor]]]


@dataclass(frozen=True)
class PolicyLoss:
    fn: PolicyLossFn  # (logp, old_logp or None = on-policy, advantages, mask, cfg) -> (per-token loss, stats)
    aggregation: str  # how core.aggregate_loss reduces the per-token loss (core.AGGREGATIONS)


POLICY_LOSSES: dict[str, PolicyLoss] = {}


def register_policy_loss(
    *names: str, aggregation: str | None = None
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss under one or more loss_type names; `aggregation` defaults to the name itself."""

    def register(fn: PolicyLossFn) -> PolicyLossFn:
        for name in names:  # every name checked before any is registered
            if name in POLICY_LOSSES:
                raise ValueError(f"policy loss {name!r} is already registered")
            if (aggregation or name) not in AGGREGATIONS:
                raise ValueError(
                    f"policy loss {name!r}: aggregation must be one of {AGGREGATIONS}, got {aggregation or name!r}"
                )
        for name in names:
            POLICY_LOSSES[name] = PolicyLoss(fn, aggregation or name)
        return fn

    return register


def _scalar(x: float, like: Tensor) -> Tensor:
    """A Python number as a 0-d tensor of `like`'s dtype (torch.where on Python floats would round it to float32)."""
    return torch.tensor(x, dtype=like.dtype, device=like.device)


def _on_policy(logp: Tensor, old_logp: Tensor | None) -> Tensor:
    return logp.detach() if old_logp is None else old_logp


def _stats(
    ratio: Tensor, like: Tensor, low: Tensor | None = None, high: Tensor | None = None
) -> dict[str, Tensor]:
    """The statistics every surrogate reports (see clipped_surrogate), (B, T) each."""
    never = torch.zeros_like(like, dtype=torch.bool)
    low = never if low is None else low.expand_as(like)
    high = never if high is None else high.expand_as(like)
    return {
        "ratio": ratio.detach().expand_as(like),
        "low_clipped": low,
        "high_clipped": high,
        "clipped": low | high,
    }


def cispo_surrogate(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon_high: float,
    importance_sampling_level: str = "token",
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO (MiniMax-M1, 2025; TRL loss_type "cispo"): -sg(min(r, epsilon_high)) * A * log pi.

    The importance weight is truncated and detached, and multiplies the REINFORCE term: no token's gradient is ever
    zeroed (PPO's clip drops the tokens outside the trust region), only its weight capped. epsilon_high is the cap
    itself, not 1 + epsilon (ScaleRL recommends 5). "high_clipped": tokens of positive advantage whose weight was
    capped (TRL's cispo_clip_ratio)."""
    old_logp = _on_policy(logp, old_logp)
    ratio = torch.exp(log_importance_weights(logp, old_logp, mask, importance_sampling_level)).detach()
    weight = torch.clamp(ratio, max=epsilon_high)  # (B, T) or (B, 1)
    per_token = -(weight * advantages.unsqueeze(-1).to(logp.dtype) * logp)  # (B, T)
    capped = (ratio > epsilon_high) & (advantages.unsqueeze(-1) > 0)  # TRL's cispo_clip_ratio
    return per_token, _stats(ratio, logp, high=capped)


def sapo_surrogate(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    temperature_pos: float = 1.0,
    temperature_neg: float = 1.05,
    importance_sampling_level: str = "token",
) -> tuple[Tensor, dict[str, Tensor]]:
    """SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization"; TRL loss_type "sapo"):
    -sigmoid(tau (r - 1)) * 4 / tau * A, tau = temperature_pos where A > 0, else temperature_neg.

    The gate's slope at r = 1 is exactly 1 (sigmoid'(0) = 1/4), so near the old policy it is the plain policy
    gradient; away from it the gradient decays smoothly instead of dropping to zero at a hard clip, and faster for
    negative advantages (tau_neg > tau_pos), whose ratios are the ones that explode."""
    old_logp = _on_policy(logp, old_logp)
    ratio = torch.exp(
        log_importance_weights(logp, old_logp, mask, importance_sampling_level)
    )  # (B, T) | (B, 1)
    adv = advantages.unsqueeze(-1).to(logp.dtype)  # (B, 1)
    tau = torch.where(adv > 0, _scalar(temperature_pos, logp), _scalar(temperature_neg, logp))  # (B, 1)
    per_token = -(torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv)
    return per_token.expand_as(logp), _stats(ratio, logp)


@torch.no_grad()
def vespo_weights(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> Tensor:
    """VESPO's Gamma weight phi(w) = e^lambda * w^k * e^(-lambda w) of the sequence ratio w = prod_t r_t (not
    length-normalised), normalised so that phi(1) = 1; (k, lambda) by the advantage's sign (A >= 0: the _pos pair).
    Computed in log space with TRL's clamps (log r_t to [-20, 20], log w to [log 1e-8, 20]); returns (B, 1)."""
    log_ratio = torch.clamp(logp - old_logp, -20.0, 20.0)  # (B, T)
    seq = torch.where(mask.bool(), log_ratio, torch.zeros_like(log_ratio)).sum(-1, keepdim=True)  # (B, 1)
    log_w = torch.clamp(seq, math.log(1e-8), 20.0)
    nonneg = advantages.unsqueeze(-1) >= 0  # (B, 1)
    k = torch.where(nonneg, _scalar(k_pos, logp), _scalar(k_neg, logp))
    lam = torch.where(nonneg, _scalar(lambda_pos, logp), _scalar(lambda_neg, logp)).clamp(min=1e-4)
    log_phi = lam + k * log_w - lam * torch.exp(log_w)
    return torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo_surrogate(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    **gamma: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """VESPO ("Variational Sequence-Level Soft Policy Optimization", 2026; TRL loss_type "vespo"):
    -sg(phi(w)) * A * log pi with phi the Gamma weight of `vespo_weights` (keywords k_pos, lambda_pos, k_neg,
    lambda_neg). A soft, asymmetric trust region on the whole sequence's ratio: phi peaks at w = k / lambda and
    decays on both sides. "ratio" reports phi."""
    old_logp = _on_policy(logp, old_logp)
    phi = vespo_weights(logp, old_logp, advantages, mask, **gamma)  # (B, 1)
    per_token = -(phi * advantages.unsqueeze(-1).to(logp.dtype) * logp)  # (B, T)
    return per_token, _stats(phi, logp)


def gmpo_surrogate(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon_low: float = 0.4,
    epsilon_high: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GMPO (Zhao et al. 2025, "Geometric-Mean Policy Optimization"; verl's "geo_mean" policy loss): the sequence's
    loss is -A * exp(mean_t clip(log r_t)), the GEOMETRIC mean of its token ratios, each clipped in log space to
    [-epsilon_low, epsilon_high] in the pessimistic direction (as PPO: sign(A) * min(sign(A) log r, sign(A) clip)).
    An outlier token moves a geometric mean far less than the arithmetic mean GRPO's token average amounts to, so
    the clip range can be wider (the paper: 0.4 in log space).

    Returns the sequence loss spread over the row (every token of row b holds loss_b): aggregated by the per-row
    mean ("grpo", the aggregation gmpo is registered with), it is the mean of the sequence losses over the batch."""
    if epsilon_high is None:
        epsilon_high = epsilon_low
    old_logp = _on_policy(logp, old_logp)
    m = mask.bool()
    log_ratio = logp - old_logp  # (B, T) (verl does not clamp it: the clip below bounds what enters the loss)
    sign = torch.sign(advantages).unsqueeze(-1).to(logp.dtype)  # (B, 1)
    clipped = torch.clamp(log_ratio, -epsilon_low, epsilon_high)
    pessimistic = sign * torch.min(sign * log_ratio, sign * clipped)  # (B, T)
    n = m.sum(-1).to(logp.dtype)  # (B,)
    mean_log = torch.where(m, pessimistic, torch.zeros_like(pessimistic)).sum(-1) / n.clamp(min=1)  # (B,)
    seq_ratio = torch.exp(mean_log)  # (B,)
    per_seq = -(advantages.to(logp.dtype) * seq_ratio)  # (B,)
    ratio = torch.exp(log_ratio.detach())
    adv = advantages.unsqueeze(-1)
    low = (log_ratio.detach() < -epsilon_low) & (adv < 0)
    high = (log_ratio.detach() > epsilon_high) & (adv > 0)
    return per_seq.unsqueeze(-1).expand_as(logp), _stats(ratio, logp, low, high)


def off_policy_mask(
    advantages: Tensor, logp: Tensor, old_logp: Tensor | None, mask: Tensor, threshold: float
) -> Tensor:
    """DeepSeek-V3.2's off-policy sequence masking (TRL's off_policy_mask_threshold): a completion with a negative
    advantage whose mean per-token KL estimate log pi_old - log pi (k1, over its tokens) exceeds `threshold` is left
    out of the loss: pushing down a sample the policy has already moved away from mostly adds noise. Returns (B, 1)
    in logp's dtype: 1 keep, 0 drop. On-policy (old_logp None) the KL is 0 and every row is kept."""
    if old_logp is None:
        return torch.ones(logp.size(0), 1, dtype=logp.dtype, device=logp.device)
    m = mask.bool()
    kl = torch.where(m, old_logp - logp.detach(), torch.zeros_like(logp))  # (B, T)
    mean_kl = kl.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1).to(logp.dtype)  # (B, 1)
    keep = (advantages.unsqueeze(-1) >= 0) | (mean_kl <= threshold)
    return keep.to(logp.dtype)


def entropy_threshold(entropies: Tensor, top_entropy_quantile: float) -> Tensor:
    """The entropy above which a token is among the top `top_entropy_quantile` of `entropies` (a 1-D pool: every
    process's completion tokens): torch.quantile at 1 - rho, linear interpolation (as TRL). Empty pool: +inf."""
    if entropies.numel() == 0:
        return torch.full((), math.inf, dtype=entropies.dtype)
    x = (
        entropies.float() if entropies.dtype in (torch.float16, torch.bfloat16) else entropies
    )  # quantile: no half
    return torch.quantile(x, 1.0 - top_entropy_quantile).to(entropies.dtype)


def high_entropy_mask(entropies: Tensor, mask: Tensor, threshold: Tensor | float) -> Tensor:
    """Beyond the 80/20 rule (Wang et al. 2025; TRL's top_entropy_quantile): the completion tokens whose entropy is
    at least the threshold (see entropy_threshold): (B, T) bool, False on padding."""
    return (entropies >= threshold) & mask.bool()


# ----------------------------------------------------------------------------------------------------------------
# the registered loss types, in the order users know them (loss_type's help and messages list them so)


@register_policy_loss("grpo", "bnpo", "dr_grpo", "dapo")
def ppo_clip_loss(
    logp: Tensor, old_logp: Tensor | None, advantages: Tensor, mask: Tensor, cfg: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate (core.clipped_surrogate); these loss types differ only in their aggregation."""
    return clipped_surrogate(
        logp,
        old_logp,
        advantages,
        mask,
        epsilon_low=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        delta=cfg.delta,
        importance_sampling_level=cfg.importance_sampling_level,
    )


@register_policy_loss("cispo", aggregation="dapo")
def cispo_loss(
    logp: Tensor, old_logp: Tensor | None, advantages: Tensor, mask: Tensor, cfg: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    eps_high = cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high
    level = cfg.importance_sampling_level
    return cispo_surrogate(
        logp, old_logp, advantages, mask, epsilon_high=eps_high, importance_sampling_level=level
    )


@register_policy_loss("sapo", aggregation="grpo")
def sapo_loss(
    logp: Tensor, old_logp: Tensor | None, advantages: Tensor, mask: Tensor, cfg: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    return sapo_surrogate(
        logp,
        old_logp,
        advantages,
        mask,
        temperature_pos=cfg.sapo_temperature_pos,
        temperature_neg=cfg.sapo_temperature_neg,
        importance_sampling_level=cfg.importance_sampling_level,
    )


# LUSPO: PPO's clip (above) with per-sequence token sums, for GSPO's sequence ratio.
register_policy_loss("luspo")(ppo_clip_loss)


@register_policy_loss("vespo", aggregation="dapo")
def vespo_loss(
    logp: Tensor, old_logp: Tensor | None, advantages: Tensor, mask: Tensor, cfg: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    gamma = {"k_pos": cfg.vespo_k_pos, "lambda_pos": cfg.vespo_lambda_pos}
    gamma |= {"k_neg": cfg.vespo_k_neg, "lambda_neg": cfg.vespo_lambda_neg}
    return vespo_surrogate(logp, old_logp, advantages, mask, **gamma)


@register_policy_loss("gmpo", aggregation="grpo")
def gmpo_loss(
    logp: Tensor, old_logp: Tensor | None, advantages: Tensor, mask: Tensor, cfg: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    return gmpo_surrogate(
        logp, old_logp, advantages, mask, epsilon_low=cfg.epsilon, epsilon_high=cfg.epsilon_high
    )


LOSS_TYPES = tuple(POLICY_LOSSES)  # the registered names, for config choices and help
