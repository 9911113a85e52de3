"""The policy-loss variants beside PPO's clip (tinygrpo.algorithm.core.clipped_surrogate), their registry, and the
loss's options (LossConfig).

Each maps the policy's log-probs of the sampled tokens, the old policy's, the advantages and the completion mask to a
(B, T) per-token loss (minimised), with TRL's definitions where TRL has the variant and verl's for GMPO:

    cispo   -sg(min(r, eps_high)) * A * log pi                   MiniMax-M1 (2025): clip the weight, not the update
    sapo    -sigmoid(tau (r - 1)) * 4 / tau * A                  SAPO (Gao et al. 2025): a soft, smooth trust region
    vespo   -sg(phi(w)) * A * log pi, phi(w) = e^l w^k e^(-l w)   VESPO (2026): a Gamma weight of the sequence ratio w
    gmpo    -A * exp(mean_t clip(log r_t)), per sequence          GMPO (Zhao et al. 2025): geometric mean of ratios

r = pi / pi_old per token, or GSPO's length-normalised sequence ratio (importance_sampling_level "sequence"); sg =
stop-gradient. On-policy (old_logp None: r is exactly 1 in value) every variant's gradient is a multiple of the
plain policy gradient -A grad log pi: 1 for sapo, vespo and gmpo, min(1, eps_high) for cispo.

Shapes as in tinygrpo.algorithm.core: B completions, T tokens, (B,) advantages (which also holds the token masks some
variants add: off_policy_mask, high_entropy_mask).

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
from typing import ClassVar

import torch
from torch import Tensor

from tinygrpo.algorithm.core import (
    AGGREGATIONS,
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    clipped_surrogate,
    log_importance_weights,
)
from tinygrpo.base.options import (
    AT_LEAST_1,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    Bound,
    ConfigError,
    Options,
    option,
)

PolicyLossFn = Callable[
    [Tensor, Tensor | None, Tensor, Tensor, "LossConfig"], tuple[Tensor, dict[str, Tensor]]
]


@dataclass(frozen=True)
class PolicyLoss:
    fn: PolicyLossFn  # (logp, old_logp or None = on-policy, advantages, mask, cfg) -> (per-token loss, stats)
    aggregation: str  # how core.aggregate_loss reduces the per-token loss (core.AGGREGATIONS)


POLICY_LOSSES: dict[str, PolicyLoss] = {}
# epsilon's range under PPO's clip (LossConfig's rule: other loss types read epsilon otherwise)
PPO_EPSILON = Bound(0, 1, lo_open=True, hi_open=True)


@dataclass
class LossConfig(Options):
    """What the loss reads: the policy loss and its variants (the loss types' options, the token masks, the explore
    rounds' importance weights), the KL to the reference (and the reference's sync) and the entropy bonus."""

    _argument_group_name: ClassVar[str] = "loss, KL and entropy"

    skip_zero_advantage_groups: bool = option(
        True,
        "Leave groups whose advantages are all zero out of the forward/backward when the loss has no KL "
        "(beta 0) and no entropy term (entropy_coef, top_entropy_quantile). "
        "Exact: their loss terms are zero; the normalisers still count them.",
    )
    loss_type: str = option(
        "dapo",
        "grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo, gmpo (or a loss registered with register_policy_loss), as in TRL (gmpo as in verl). The first four are PPO's clipped "
        "surrogate, reduced differently: grpo a per-sequence token mean (Shao et al. 2024), bnpo the local "
        "batch's token mean, dr_grpo a constant (B * max_completion_length; Liu et al. 2025), dapo the global "
        "batch's token mean (Yu et al. 2025). cispo: truncated, detached importance weights times the "
        "REINFORCE term (MiniMax-M1, 2025; epsilon_high is the cap, ScaleRL recommends 5); sapo: a smooth "
        "sigmoid gate instead of the clip (Gao et al. 2025); luspo: per-sequence token SUM, for "
        "importance_sampling_level sequence (LUSPO, 2026); vespo: a Gamma weight of the sequence ratio "
        "(VESPO, 2026); gmpo: the geometric mean of the clipped token ratios, epsilon/epsilon_high bound "
        "the log ratio (Zhao et al. 2025). tinygrpo/algorithm/policy_losses.py has the formulas.",
        choices=POLICY_LOSSES.keys(),
    )
    sapo_temperature_pos: float = option(
        1.0, "sapo's gate temperature for tokens with a positive advantage (Gao et al. 2025).", bound=POSITIVE
    )
    sapo_temperature_neg: float = option(
        1.05,
        "sapo's gate temperature for the other tokens (Gao et al. 2025): higher decays faster.",
        bound=POSITIVE,
    )
    vespo_k_pos: float = option(
        2.0,
        "vespo's Gamma power k for A >= 0: down-weights sequences with w < 1 (VESPO).",
        bound=NON_NEGATIVE,
    )
    vespo_lambda_pos: float = option(
        3.0, "vespo's Gamma decay lambda for A >= 0: down-weights w > 1 (VESPO).", bound=POSITIVE
    )
    vespo_k_neg: float = option(3.0, "vespo's Gamma power k for A < 0 (VESPO).", bound=NON_NEGATIVE)
    vespo_lambda_neg: float = option(2.0, "vespo's Gamma decay lambda for A < 0 (VESPO).", bound=POSITIVE)
    off_policy_mask_threshold: float | None = option(
        None,
        "Leave out of the loss every completion with a negative advantage whose mean per-token KL "
        "log pi_old - log pi exceeds this (DeepSeek-V3.2, 2025, eq. 9; e.g. 0.5). Acts only off-policy "
        "(num_iterations > 1 or num_mini_batches > 1). None: off.",
        bound=POSITIVE,
    )
    top_entropy_quantile: float = option(
        1.0,
        "rho: train only on the top-rho quantile of completion tokens by entropy, over the mini-batch "
        "of every process (Wang et al. 2025, Beyond the 80/20 Rule, recommend 0.2). 1.0 keeps every token; "
        "0.0 keeps only the highest-entropy ones. With a row-level loss (gmpo, a sequence-level ratio) the mask "
        "scales each row's loss by its share of kept tokens rather than selecting tokens (as in TRL).",
        bound=PROBABILITY,
    )
    epsilon: float = option(0.2, "Lower clip: ratio >= 1 - epsilon.", bound=POSITIVE)
    epsilon_high: float | None = option(
        None, "Upper clip: ratio <= 1 + epsilon_high (DAPO clip-higher); None = epsilon.", bound=POSITIVE
    )
    delta: float | None = option(
        None, "Two-sided GRPO: clamp the unclipped ratio at delta (> 1 + epsilon_high)."
    )
    importance_sampling_level: str = option(
        "token",
        "token, or sequence (GSPO, Zheng et al. 2025: length-normalised ratio).",
        choices=IMPORTANCE_SAMPLING_LEVELS,
    )
    explore_importance_sampling_correction: bool = option(
        False,
        "Reweight the tokens of explore samples to the policy's temperature (explore_importance_sampling_"
        "clip_max). False trains on them as if sampled at the run's temperature: biased, but a rare right "
        "answer found hot keeps its full push (with the correction its weight is pi_T(y) / pi_T'(y), tiny).",
    )
    explore_importance_sampling_clip_max: float = option(
        3.0,
        "Cap C of the token-level truncated importance weight min(pi(y_t) / pi_T'(y_t), C) of a token "
        "sampled at an explore temperature T' (TIS, Yao et al. 2025; TRL's vllm_importance_sampling_clip_max).",
        bound=POSITIVE,
    )
    entropy_coef: float = option(
        0.0,
        "Entropy bonus: loss - entropy_coef * mean per-token entropy over the tokens the policy loss "
        "acts on, whatever the loss_type (as TRL). With use_adaptive_entropy, the initial coefficient.",
    )
    use_adaptive_entropy: bool = option(
        False,
        "Adaptive entropy control (Skywork-OR1, He et al. 2025): after each optimizer step the "
        "coefficient moves up by entropy_coef_delta when the mean entropy is at or below entropy_target, "
        "down otherwise (within [entropy_coef_min, entropy_coef_max]); the bonus applies only while the "
        "entropy is at or below the target.",
    )
    entropy_coef_min: float = option(0.0, "Adaptive entropy control's lower bound.", bound=NON_NEGATIVE)
    entropy_coef_max: float = option(1.0, "Adaptive entropy control's upper bound.")
    entropy_coef_delta: float = option(0.005, "Adaptive entropy control's step.", bound=NON_NEGATIVE)
    entropy_target: float = option(
        0.2, "Adaptive entropy control's target mean per-token entropy (nats).", bound=NON_NEGATIVE
    )
    beta: float = option(0.0, "KL coefficient to the reference (0 = no reference built).", bound=NON_NEGATIVE)
    use_bias_correction_kl: bool = option(
        True,
        "Multiply the per-token KL by the (differentiable) importance ratio, so that its gradient is the "
        "unbiased gradient of the reverse KL (DeepSeek-V3.2, 2025; TRL's default). It changes the gradient even "
        "on-policy, where the ratio's value is exactly 1. Only with beta > 0 and a sampled kl_estimator (k1, k2, "
        "k3): the exact per-position KL (full) does not depend on the token sampled there.",
    )
    use_kl_in_reward: bool = option(
        False,
        "Put the KL in the reward instead of the loss (PPO for RLHF, Ouyang et al. 2022; verl's "
        "use_kl_in_reward, OpenRLHF): each completion's reward loses beta x the sum over its tokens of k1 = "
        "log pi(y_t) - log pi_ref(y_t) (the sampling policy's), before advantages; the loss then has no KL "
        "term. Needs beta > 0; costs a policy and a reference forward per generation round.",
    )
    kl_estimator: str = option(
        "k3",
        f"Per-token KL: {', '.join(KL_ESTIMATORS)}. k3 is DeepSeekMath's; full is the exact KL "
        "over the vocabulary at each position.",
        choices=KL_ESTIMATORS,
    )
    sync_ref_model: bool = option(False, "Move the reference towards the policy.")
    ref_model_mixup_alpha: float = option(
        0.6, "ref = alpha * policy + (1 - alpha) * ref at each sync.", bound=PROBABILITY
    )
    ref_model_sync_steps: int = option(512, "Steps between reference syncs.", bound=AT_LEAST_1)

    @property
    def needs_reference(self) -> bool:
        """A reference model is loaded and scored (beta > 0: the KL in the loss or in the reward)."""
        return self.beta > 0

    @property
    def kl_in_loss(self) -> bool:
        """The loss has a KL term (beta > 0, and the KL is not in the reward instead)."""
        return self.beta > 0 and not self.use_kl_in_reward

    @property
    def entropy_bonus(self) -> bool:
        """An entropy term is in the loss (TRL: a non-zero coefficient, or adaptive control that may raise it)."""
        return self.entropy_coef != 0 or self.use_adaptive_entropy

    @property
    def loss_is_zero_without_advantage(self) -> bool:
        """A group whose advantages are all zero adds exactly nothing to the loss or its gradient: no KL, no entropy
        bonus, and no token pool (top_entropy_quantile) that its tokens would change."""
        return not self.kl_in_loss and not self.entropy_bonus and self.top_entropy_quantile == 1

    def rules(self) -> None:
        # PPO's clip (core.clipped_surrogate: the loss types registered with ppo_clip_loss) keeps the ratio within
        # [1 - epsilon, 1 + epsilon_high]: epsilon >= 1 leaves it no lower side, and the first update off the
        # sampling policy fails. (cispo reads epsilon as a cap on the weight and gmpo as a clip of log-ratios, where
        # values >= 1 mean something.) Checked even where the ratio is exactly 1 and the clip never acts.
        if POLICY_LOSSES[self.loss_type].fn is ppo_clip_loss and not PPO_EPSILON.admits(self.epsilon):
            raise ConfigError(
                f"epsilon must be {PPO_EPSILON.describe()} for loss_type {self.loss_type} (its clip range starts at "
                f"1 - epsilon), got {self.epsilon}"
            )
        # Two-sided GRPO's cap on the unclipped ratio must lie above the clip range, or it clips inside it.
        if self.delta is not None and not self.delta > 1 + (self.epsilon_high or self.epsilon):
            raise ConfigError(f"delta must be > 1 + epsilon_high, got {self.delta}")
        # Adaptive entropy control moves the coefficient within [min, max]: an empty interval.
        if not self.entropy_coef_min <= self.entropy_coef_max:
            raise ConfigError(
                f"entropy_coef_min={self.entropy_coef_min} must be <= entropy_coef_max={self.entropy_coef_max}"
            )
        # The KL in the reward and the reference's sync both need a reference, which beta == 0 does not build.
        if self.use_kl_in_reward and self.beta == 0:
            raise ConfigError("use_kl_in_reward needs beta > 0 (the KL's coefficient in the reward)")
        if self.sync_ref_model and self.beta == 0:
            raise ConfigError("sync_ref_model needs beta > 0 (with beta == 0 there is no reference)")


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
