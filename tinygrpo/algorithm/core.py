"""The GRPO math as small pure tensor functions, shared by the token-level trainer and the tabular bandit.

Nothing here knows about models, tokenizers or processes: every function maps tensors to tensors, so the same code
runs on a (B, T, V) language model's logits and on a (n_questions, n_answers) table, and the oracle tests can pin
each formula down in isolation.

Shapes: B = number of completions (num_groups * num_generations), T = completion length, V = vocabulary size.
Masks are (B, T) bool or 0/1 tensors; masked positions of the inputs may hold any finite value.

Conventions (defaults follow TRL's GRPOTrainer):
- advantages: r - group mean, divided by the group's UNBIASED std + 1e-4 (TRL). The seed demo's numpy
  `(r - r.mean()) / (r.std() + 1e-8)` (population std) is `std_correction=0, eps=1e-8`.
- the loss is minimised: per-token loss = -min(r * A, clip(r) * A) (+ beta * KL, added by the caller).
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

GROUP_MODES = (
    "grpo",
    "rloo",
    "reinforce",
)  # group_advantages' modes (the other estimators: advantage_estimators)
SCALE_REWARDS = ("group", "batch", "none")
KL_ESTIMATORS = ("k1", "k2", "k3", "full")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
# How a (B, T) per-token loss is reduced to a scalar (see aggregate_loss). Each loss type names its aggregation when
# it is registered (tinygrpo.algorithm.policy_losses.register_policy_loss).
AGGREGATIONS = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


# ----------------------------------------------------------------------------------------------------------------
# advantages


def group_advantages(
    rewards: Tensor,
    num_generations: int,
    *,
    mode: str = "grpo",
    scale_rewards: str = "group",
    std_correction: int = 1,
    eps: float = 1e-4,
) -> tuple[Tensor, Tensor]:
    """Group-relative advantages, one scalar per completion: rewards (N,), consecutive blocks of `num_generations`
    one prompt's group -> (advantages (N,), zero_std (N / G,) bool).

    mode "grpo": A = r - group mean, then by `scale_rewards`: "group" divides by (group std + eps) (GRPO,
    DeepSeekMath), "batch" by (std of every valid reward of the batch + eps) (TRL), "none" not at all (Dr. GRPO, Liu
    et al. 2025). "rloo": A_i = r_i - the mean of the OTHER rewards of its group (Ahmadian et al. 2024), unscaled.
    "reinforce": A = r (NaN -> 0). std_correction 1 is the unbiased std (TRL's), 0 numpy's (the seed demo's, with
    eps 1e-8).

    NaN means "no reward applies": left out of its group's statistics and the batch std, advantage exactly 0. A group
    is zero_std when its valid rewards are all equal or fewer than 2: no sample is better than another, and for grpo
    and rloo its advantages are exactly 0.0 (r - mean need not round to 0). Integer rewards become floats.
    """
    _check_choice("mode", mode, GROUP_MODES)
    _check_choice("scale_rewards", scale_rewards, SCALE_REWARDS)
    if std_correction not in (0, 1) or not eps >= 0:
        raise ValueError(f"std_correction must be 0 or 1 and eps >= 0, got {std_correction!r} and {eps!r}")
    G = num_generations
    if isinstance(G, bool) or not isinstance(G, numbers.Integral) or G < 2:
        raise ValueError(f"num_generations must be an int >= 2, got {G!r}")
    if rewards.dim() != 1 or rewards.numel() % G:
        raise ValueError(
            f"rewards must be 1-D with a multiple of num_generations={G} entries, got {tuple(rewards.shape)}"
        )
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    r = rewards.view(-1, G)  # (P, G)
    valid = ~torch.isnan(r)
    if bool(valid.all()):  # (the usual case: every mask below is the identity, and is skipped; the same bits)
        return _complete_groups(r, mode, scale_rewards, std_correction, eps)
    n = valid.sum(-1, keepdim=True).to(r.dtype)  # (P, 1) valid samples per group
    r0 = torch.where(valid, r, torch.zeros_like(r))  # NaN -> 0 so sums stay finite
    # "all equal" by exact comparison, not std < tol: a tolerance would silently drop real (tiny) signal.
    hi = torch.where(valid, r, torch.full_like(r, -torch.inf)).amax(-1)
    lo = torch.where(valid, r, torch.full_like(r, torch.inf)).amin(-1)
    zero_std = (hi == lo) | (n.squeeze(-1) < 2)  # (P,)
    if mode == "reinforce":
        return r0.reshape(-1), zero_std
    if mode == "rloo":
        adv = r0 - (r0.sum(-1, keepdim=True) - r0) / (n - 1).clamp(min=1)  # n < 2 is zero_std -> masked below
    else:
        adv = r0 - r0.sum(-1, keepdim=True) / n.clamp(min=1)  # (P, G)
        if scale_rewards == "group":
            var = torch.where(valid, adv, torch.zeros_like(adv)).square().sum(-1, keepdim=True)  # (P, 1)
            adv = adv / ((var / (n - std_correction).clamp(min=1)).sqrt() + eps)
        elif scale_rewards == "batch":  # (TRL: the GROUP mean is subtracted, the BATCH std divides)
            flat = r[valid]
            std = flat.std(correction=std_correction) if flat.numel() > std_correction else r.new_zeros(())
            adv = adv / (std + eps)
    adv = torch.where(valid & ~zero_std.unsqueeze(-1), adv, torch.zeros_like(adv))
    return adv.reshape(-1), zero_std


def _complete_groups(
    r: Tensor, mode: str, scale_rewards: str, std_correction: int, eps: float
) -> tuple[Tensor, Tensor]:
    """group_advantages of (P, G) rewards without NaN: each group has G valid rewards."""
    G = r.size(1)
    zero_std = r.amax(-1) == r.amin(-1)  # (P,)
    if mode == "reinforce":
        return r.reshape(-1), zero_std
    if mode == "rloo":
        adv = r - (r.sum(-1, keepdim=True) - r) / (G - 1)
    else:
        adv = r - r.sum(-1, keepdim=True) / G
        if scale_rewards == "group":
            adv = adv / ((adv.square().sum(-1, keepdim=True) / (G - std_correction)).sqrt() + eps)
        elif scale_rewards == "batch":
            adv = adv / (r.reshape(-1).std(correction=std_correction) + eps)
    adv = torch.where(~zero_std.unsqueeze(-1), adv, torch.zeros_like(adv))
    return adv.reshape(-1), zero_std


# ----------------------------------------------------------------------------------------------------------------
# per-token quantities from logits

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def at_least_float32(t: Tensor) -> Tensor:
    """Half-precision tensors (autocast's logits) as float32; float32 and float64 ones as they are."""
    return t.float() if t.dtype in _LOW_PRECISION else t


def selective_log_softmax(logits: Tensor, index: Tensor, temperature: float = 1.0) -> Tensor:
    """log pi(index) under softmax(logits / temperature): (..., V), (...) long -> (...).

    Memory lean: gathers the chosen logit and subtracts logsumexp, so no (..., V) log-softmax copy is kept for
    backward (logsumexp saves only its input and its (...) output). With temperature != 1 the division makes one
    (..., V) copy. Half-precision logits are processed in float32 row chunks (logsumexp in bf16 loses too much)
    and the result is float32.
    """
    _check_temperature(temperature)
    if index.shape != logits.shape[:-1]:
        raise ValueError(
            f"index must have shape logits.shape[:-1]={tuple(logits.shape[:-1])}, got {tuple(index.shape)}"
        )
    if temperature != 1.0:
        logits = logits / temperature
    if logits.dtype in _LOW_PRECISION:
        flat = logits.reshape(-1, logits.shape[-1])  # (R, V)
        idx = index.reshape(-1)  # (R,)
        chunks = []
        for start in range(0, flat.shape[0], 1024):  # bounded float32 working set
            rows = flat[start : start + 1024].float()
            ids = idx[start : start + 1024].unsqueeze(-1)
            chunks.append(rows.gather(-1, ids).squeeze(-1) - torch.logsumexp(rows, dim=-1))
        return torch.cat(chunks).view(index.shape)
    chosen = logits.gather(-1, index.unsqueeze(-1)).squeeze(-1)  # (...)
    return chosen - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy H(pi) = -sum_v pi(v) log pi(v) of softmax(logits / temperature): (..., V) -> (...)."""
    _check_temperature(temperature)
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(at_least_float32(logits), dim=-1)  # (..., V)
    return -(logp.exp() * logp).sum(-1)


def full_kl(logits: Tensor, ref_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Exact KL(pi || pi_ref) = sum_v pi(v) (log pi(v) - log pi_ref(v)) at every position: (..., V) x2 -> (...).

    Both logits are divided by the temperature (as TRL does for the reference). Affordable when V is small (a
    character vocabulary, a bandit's answers); it is the zero-variance alternative to the sampled k1/k2/k3.
    """
    _check_temperature(temperature)
    if logits.shape != ref_logits.shape:
        raise ValueError(
            f"ref_logits must have the shape of logits {tuple(logits.shape)}, got {tuple(ref_logits.shape)}"
        )
    if temperature != 1.0:
        logits, ref_logits = logits / temperature, ref_logits / temperature
    if logits.dtype in _LOW_PRECISION:
        logits, ref_logits = logits.float(), ref_logits.float()
    logp = logits - logits.logsumexp(-1, keepdim=True)  # (..., V) normalised as torch's Categorical does
    ref_logp = ref_logits - ref_logits.logsumexp(-1, keepdim=True)  # (..., V)
    return (logp.exp() * (logp - ref_logp)).sum(-1)


def kl_estimate(logp: Tensor, ref_logp: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token sample estimators of KL(pi || pi_ref) (Schulman, "Approximating KL divergence", 2020).

    logp, ref_logp: (B, T) log-probabilities of tokens SAMPLED FROM pi. With log_r = ref_logp - logp:
      k1 = -log_r                      unbiased, high variance, can be negative per token
      k2 = 0.5 * log_r**2              biased (exact to second order for nearby distributions), >= 0
      k3 = exp(log_r) - log_r - 1      unbiased and >= 0 (DeepSeekMath, TRL)
    "full" is not a sample estimator: use `full_kl` on logits. Returns (B, T).
    """
    if estimator == "full":
        raise ValueError("estimator 'full' needs logits, not log-probs: call full_kl(logits, ref_logits)")
    _check_choice("estimator", estimator, KL_ESTIMATORS)
    log_r = ref_logp - logp  # (B, T)
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r.square()
    return torch.exp(log_r) - log_r - 1


# ----------------------------------------------------------------------------------------------------------------
# the clipped surrogate and its aggregation


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: str = "token",
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped objective, negated to a per-token loss: -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A).

    logp, old_logp, mask: (B, T); advantages: (B,). r = exp(logp - old_logp) per token ("token"), or for "sequence"
    (GSPO, Zheng et al. 2025) the length-normalised sequence ratio exp(sum_t mask * (logp - old_logp) / max(1, sum_t
    mask)), the same for every token of a row. epsilon_high None -> epsilon_low (higher: DAPO's clip-higher). delta
    (two-sided GRPO, as in TRL) clamps the first term's unclipped ratio at delta.

    old_logp None means on-policy (num_iterations 1): old_logp is logp.detach(), so r is exactly 1, nothing is
    clipped, and the gradient is the plain policy gradient -A * grad(logp). With token-level ratios and no delta
    below 1, min(r A, clip(r) A) is then r A in value and in gradient (torch's min splits a tie in halves, each of
    derivative A), and is computed so, in a third of the operations (tests/test_core.py: the same bits).

    Returns (per_token_loss (B, T), stats), not reduced: "ratio" (B, T) (before the delta clamp), "low_clipped" =
    (r < 1 - eps_low) & (A < 0), "high_clipped" = (r > 1 + eps_high) & (A > 0), "clipped" = either: exactly the
    tokens whose gradient the clip zeroes. Masked positions may hold anything; `aggregate_loss` applies the mask.
    """
    _check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    if not (0 <= epsilon_low < 1 and epsilon_high >= 0 and (delta is None or delta > 0)):
        raise ValueError(
            f"epsilon_low must be in [0, 1), epsilon_high >= 0 and delta > 0 (TRL recommends > 1 + epsilon), got "
            f"{epsilon_low!r}, {epsilon_high!r} and {delta!r}"
        )
    if old_logp is None and importance_sampling_level == "token" and (delta is None or delta >= 1):
        ratio = torch.exp(logp - logp.detach())  # (B, T), exactly 1
        never = torch.zeros_like(logp, dtype=torch.bool)
        stats = {"ratio": ratio.detach(), "low_clipped": never, "high_clipped": never, "clipped": never}
        return -(ratio * advantages.unsqueeze(-1).to(ratio.dtype)), stats
    old_logp = logp.detach() if old_logp is None else old_logp
    shapes = (old_logp.shape, mask.shape, advantages.shape)
    if logp.dim() != 2 or shapes != (logp.shape, logp.shape, logp.shape[:1]):
        raise ValueError(
            "logp, old_logp and mask must share one (B, T) shape and advantages be (B,), got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)} and {tuple(advantages.shape)}"
        )
    ratio = torch.exp(
        log_importance_weights(logp, old_logp, mask, importance_sampling_level)
    )  # (B, T) | (B, 1)
    clipped_ratio = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high)
    unclipped_ratio = ratio if delta is None else torch.clamp(ratio, max=delta)
    adv = advantages.unsqueeze(-1).to(ratio.dtype)  # (B, 1)
    per_token_loss = -torch.min(unclipped_ratio * adv, clipped_ratio * adv)  # (B, T) or (B, 1)
    per_token_loss = per_token_loss.expand_as(logp)  # (B, T)
    ratio_bt = ratio.detach().expand_as(logp)  # (B, T)
    low = (ratio_bt < 1.0 - epsilon_low) & (adv < 0)
    high = (ratio_bt > 1.0 + epsilon_high) & (adv > 0)
    stats = {"ratio": ratio_bt, "low_clipped": low, "high_clipped": high, "clipped": low | high}
    return per_token_loss, stats


def log_importance_weights(logp: Tensor, old_logp: Tensor, mask: Tensor, level: str = "token") -> Tensor:
    """log of the importance ratio pi / pi_old: per token (B, T) for "token", or for "sequence" (GSPO, Zheng et al.
    2025) the masked mean over the row's tokens, (B, 1). Differentiable in logp."""
    _check_choice("importance_sampling_level", level, IMPORTANCE_SAMPLING_LEVELS)
    log_ratio = logp - old_logp  # (B, T)
    if level == "token":
        return log_ratio
    m = mask.bool()
    summed = torch.where(m, log_ratio, torch.zeros_like(log_ratio)).sum(-1, keepdim=True)  # (B, 1)
    return summed / m.sum(-1, keepdim=True).clamp(min=1).to(log_ratio.dtype)  # (B, 1)


def aggregate_loss(
    per_token_loss: Tensor,
    mask: Tensor,
    aggregation: str = "grpo",
    *,
    max_completion_length: int | None = None,
    num_items_in_batch: float | Tensor | None = None,
) -> Tensor:
    """Reduce a (B, T) per-token loss to a scalar; the aggregations (AGGREGATIONS) differ only in the normaliser.

    "grpo"    per-sequence masked mean, then mean over sequences (DeepSeekMath). A row without tokens
              contributes 0 but is still counted in the mean. Long answers get less weight per token.
    "bnpo"    masked sum / max(1, mask.sum()): every token of the (micro-)batch weighs the same.
    "dr_grpo" masked sum / (B * max_completion_length) (Dr. GRPO): a constant normaliser, no length bias;
              `max_completion_length` is required.
    "dapo"    masked sum / num_items_in_batch (DAPO): the number of completion tokens in the WHOLE global batch
              (across processes and gradient-accumulation micro-batches), so that micro-batch losses add up to
              the global token mean. Defaults to mask.sum() (then equal to "bnpo").
    "luspo"   per-sequence masked SUM, then mean over sequences (LUSPO, as in TRL): a sequence's loss grows with
              its length, undoing the length normalisation of GSPO's sequence ratio.
    Each loss type names the aggregation it is reduced by (cispo, vespo: "dapo"; sapo, gmpo: "grpo";
    tinygrpo.algorithm.policy_losses.POLICY_LOSSES).
    """
    _check_choice("aggregation", aggregation, AGGREGATIONS)
    if per_token_loss.dim() != 2 or mask.shape != per_token_loss.shape:
        raise ValueError(
            f"per_token_loss and mask must share one (B, T) shape, got {tuple(per_token_loss.shape)} "
            f"and {tuple(mask.shape)}"
        )
    m = mask.bool()
    masked = torch.where(m, per_token_loss, torch.zeros_like(per_token_loss))  # (B, T)
    if aggregation == "grpo":
        count = m.sum(-1).to(per_token_loss.dtype)  # (B,) tokens per row
        return (masked.sum(-1) / count.clamp(min=1)).mean()
    if aggregation == "bnpo":
        return masked.sum() / m.sum().to(per_token_loss.dtype).clamp(min=1)
    if aggregation == "luspo":
        return masked.sum(-1).mean()
    if aggregation == "dr_grpo":
        if (
            isinstance(max_completion_length, bool)
            or not isinstance(max_completion_length, numbers.Integral)
            or max_completion_length < 1
        ):
            raise ValueError(
                f"max_completion_length must be a positive int for dr_grpo, got {max_completion_length!r}"
            )
        return masked.sum() / (per_token_loss.shape[0] * max_completion_length)
    # dapo
    if num_items_in_batch is None:
        return masked.sum() / m.sum().to(per_token_loss.dtype).clamp(min=1)
    # a tensor count is not checked: reading it would force a device sync on every micro-batch
    if not isinstance(num_items_in_batch, Tensor) and not num_items_in_batch > 0:
        raise ValueError(f"num_items_in_batch must be > 0, got {num_items_in_batch!r}")
    return masked.sum() / num_items_in_batch


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over positions where mask is set; 0 when the mask is empty. Same shapes in, scalar out."""
    if mask.shape != x.shape:
        raise ValueError(f"mask must have the shape of x {tuple(x.shape)}, got {tuple(mask.shape)}")
    m = mask.bool()
    total = torch.where(m, x, torch.zeros_like(x)).sum()
    return total / m.sum().clamp(min=1).to(total.dtype)


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
        entropies.float() if entropies.dtype in _LOW_PRECISION else entropies
    )  # (quantile takes no half precision)
    return torch.quantile(x, 1.0 - top_entropy_quantile).to(entropies.dtype)


def high_entropy_mask(entropies: Tensor, mask: Tensor, threshold: Tensor | float) -> Tensor:
    """Beyond the 80/20 rule (Wang et al. 2025; TRL's top_entropy_quantile): the completion tokens whose entropy is
    at least the threshold (see entropy_threshold): (B, T) bool, False on padding."""
    return (entropies >= threshold) & mask.bool()
