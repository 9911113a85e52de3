"""The GRPO loss of one mini-batch, from the policy's logits: a pure function over tensors and a LossConfig.

    logits -> log-probs of the sampled tokens -> the policy surrogate of loss_type (ratio to the old policy)
           [x off-policy sequence mask] [x high-entropy token mask] [x explore rounds' importance weights]
           [+ beta * per-token KL to the reference (x the ratio: use_bias_correction_kl)]
           -> aggregate by loss_type [- entropy_coef * mean entropy] -> (loss, statistics)

Each arrow is a function of `tinygrpo.core` or `tinygrpo.policy_losses` (the policy loss is looked up by loss_type
in its registry, POLICY_LOSSES). The loss reads a `LossConfig` (tinygrpo/loss_config.py), built once from the run's
config with only the fields it uses. What this file adds is the bookkeeping
around a mini-batch whose zero-advantage groups were left out of the forward: the loss of the groups that were run is
normalised as if the whole mini-batch had been (their loss terms are exactly zero), so skipping them changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .batch import Batch
from .core import (
    aggregate_loss,
    entropy_from_logits,
    full_kl,
    kl_estimate,
    log_importance_weights,
    masked_mean,
    selective_log_softmax,
)
from .loss_config import LossConfig
from .policy_losses import POLICY_LOSSES, entropy_threshold, high_entropy_mask, off_policy_mask

# The per-token statistics a loss reports, as masked sums ("tokens" first: divide by it for means).
STAT_NAMES = ("tokens", "entropy", "ratio", "clip_ratio/low", "clip_ratio/high", "clip_ratio/region")
# For adaptive entropy control: the entropy summed over the tokens the bonus acts on, and their number.
ENTROPY_STATS = ("bonus/entropy_sum", "bonus/tokens")


@dataclass
class LossInputs:
    """A mini-batch as the loss sees it: the groups that are run, and how to normalise their loss."""

    batch: Batch  # the groups that enter the forward/backward
    rows: int  # completions in the whole mini-batch, skipped groups included
    tokens: Tensor  # () completion tokens in the whole mini-batch, skipped groups included
    old_logps: Tensor | None = None  # (n, Tc) log-probs before this batch's first update; None = on-policy
    ref_logps: Tensor | None = None  # (n, Tc) the reference's (beta > 0)
    ref_logits: Tensor | None = None  # (n, Tc, V) the reference's, for kl_estimator="full"


@dataclass
class LossStats:
    """Masked sums of per-token statistics (this process's tokens); `means()` after reducing over processes."""

    names: tuple[str, ...]
    sums: Tensor  # (len(names),)

    def __add__(self, other: LossStats) -> LossStats:
        return LossStats(self.names, self.sums + other.sums)

    def means(self, sums: list[float]) -> dict[str, float]:
        tokens = max(sums[0], 1.0)
        return {
            k: v / tokens for k, v in zip(self.names[1:], sums[1:], strict=True) if k not in ENTROPY_STATS
        }

    def bonus_entropy(self, sums: list[float]) -> float:
        """The mean entropy of the tokens the entropy bonus acted on (ENTROPY_STATS must be among the names)."""
        total, tokens = (sums[self.names.index(k)] for k in ENTROPY_STATS)
        return total / max(tokens, 1.0)


def explore_weights(logits: Tensor, sub: Batch, logp: Tensor, cfg: LossConfig) -> Tensor:
    """(n, Tc) truncated importance weights of the tokens of rows sampled at another temperature; exactly 1 on the
    rows sampled at the run's temperature."""
    t = sub.temperature.to(logits.device, logits.dtype)  # (n,)
    behaviour = selective_log_softmax(logits / t[:, None, None], sub.completion_ids)  # (n, Tc)
    w = torch.exp(logp - behaviour).clamp(max=cfg.explore_importance_sampling_clip_max)
    return torch.where((t == cfg.temperature)[:, None], torch.ones_like(w), w)


@dataclass
class EntropyCoefficient:
    """The entropy bonus's coefficient (TRL's entropy_coef), and Skywork-OR1's adaptive control of it: after each
    optimizer step it moves by entropy_coef_delta towards keeping the mean entropy at entropy_target, and the bonus
    is applied only while the entropy is at or below the target. Its state is the policy update's
    (PolicyUpdate.state_dict)."""

    value: float
    # the mean per-token entropy of the last optimizer step, over every process
    last_entropy: float = math.inf

    def applied(self, cfg: LossConfig) -> float:
        """The coefficient this optimizer step's loss uses (set at the end of the previous step, as in TRL)."""
        if not cfg.use_adaptive_entropy:
            return self.value
        return self.value if self.last_entropy <= cfg.entropy_target else 0.0

    def update(self, entropy: float, cfg: LossConfig) -> None:
        if not cfg.use_adaptive_entropy:
            return
        if entropy <= cfg.entropy_target:
            self.value = min(self.value + cfg.entropy_coef_delta, cfg.entropy_coef_max)
        else:
            self.value = max(self.value - cfg.entropy_coef_delta, cfg.entropy_coef_min)
        self.last_entropy = entropy

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value, "last_entropy": self.last_entropy}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value, self.last_entropy = state["value"], state["last_entropy"]


def grpo_loss(
    logits: Tensor,
    inputs: LossInputs,
    cfg: LossConfig,
    num_items_in_batch: Tensor | None = None,
    *,
    entropy_coef: float = 0.0,
    gather: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, LossStats]:
    """Scalar loss of one mini-batch and its token statistics. logits: (n, Tc, V) of `inputs.batch`.

    num_items_in_batch (loss_type "dapo"): the normaliser, the completion tokens of the GLOBAL batch divided by the
    number of processes (DDP averages the processes' gradients, so their losses must add up to a global mean).
    entropy_coef: the entropy bonus's coefficient for this step (EntropyCoefficient.applied). gather: concatenates a
    1-D tensor over processes (varying lengths), for top_entropy_quantile's token pool; None: this process only.
    """
    names = (
        STAT_NAMES + (("kl",) if cfg.kl_in_loss else ()) + (ENTROPY_STATS if cfg.use_adaptive_entropy else ())
    )
    if (
        inputs.batch.no_signal
    ):  # a forward that DDP needs, at weight 0: every parameter's gradient is exactly 0
        if cfg.top_entropy_quantile < 1 and gather:
            gather(logits.new_zeros(0))  # the other processes pool their tokens: take part, with none
        return logits.sum() * 0.0, LossStats(names, logits.new_zeros(len(names)))
    sub = inputs.batch
    mask = sub.completion_mask
    logp = selective_log_softmax(logits, sub.completion_ids, cfg.temperature)  # (n, Tc)
    # (n, Tc). With an entropy bonus the entropy is differentiated; otherwise it is a statistic (and a token mask).
    entropy = entropy_from_logits(logits if cfg.entropy_bonus else logits.detach(), cfg.temperature)
    advantages = sub.advantages.to(logp.device)  # (rewards and advantages live on the CPU)
    policy_loss = POLICY_LOSSES[cfg.loss_type]
    per_token, st = policy_loss.fn(logp, inputs.old_logps, advantages, mask, cfg)
    if cfg.off_policy_mask_threshold is not None:
        per_token = per_token * off_policy_mask(
            advantages, logp, inputs.old_logps, mask, cfg.off_policy_mask_threshold
        )
    acts_on = mask.bool()  # the tokens the policy loss (and the entropy bonus) act on
    if cfg.top_entropy_quantile < 1:
        pool = entropy.detach()[acts_on]
        threshold = entropy_threshold(gather(pool) if gather else pool, cfg.top_entropy_quantile)
        acts_on = high_entropy_mask(entropy.detach(), mask, threshold)
        per_token = per_token * acts_on
    if sub.temperature is not None and cfg.explore_importance_sampling_correction:
        # Tokens sampled at another temperature T' (explore rounds): truncated importance weights
        # min(pi_T(y) / pi_T'(y), C) bring them back to the policy's temperature (TIS, Yao et al. 2025).
        per_token = per_token * explore_weights(logits.detach(), sub, logp.detach(), cfg)
    kl = None
    if cfg.kl_in_loss:
        if cfg.kl_estimator == "full":
            kl = full_kl(logits, inputs.ref_logits, cfg.temperature)
        else:
            kl = kl_estimate(logp, inputs.ref_logps, cfg.kl_estimator)
        kl_term = kl
        if cfg.use_bias_correction_kl and cfg.kl_estimator != "full":
            # The ratio keeps its gradient (exactly 1 in value on-policy): E_old[r * k] = E_pi[k], and its gradient
            # adds k * grad log pi, the score term the reverse KL's gradient needs (DeepSeek-V3.2). The exact
            # per-position KL ("full") depends on no sampled token at its position: nothing to correct there.
            old = logp.detach() if inputs.old_logps is None else inputs.old_logps
            kl_term = kl * torch.exp(log_importance_weights(logp, old, mask, cfg.importance_sampling_level))
        per_token = per_token + cfg.beta * kl_term
    if policy_loss.aggregation == "dapo":
        loss = aggregate_loss(per_token, mask, "dapo", num_items_in_batch=num_items_in_batch)
    else:
        loss = aggregate_loss(
            per_token, mask, policy_loss.aggregation, max_completion_length=cfg.max_completion_length
        )
        # From the groups that were run to the whole mini-batch (the skipped ones contribute exact zeros).
        if policy_loss.aggregation == "bnpo":
            loss = loss * mask.sum() / inputs.tokens.clamp(min=1)
        else:
            loss = loss * sub.completion_ids.size(0) / inputs.rows
    if entropy_coef:
        # The mean entropy of the tokens the loss acts on, whatever the loss type (TRL): groups are never skipped
        # with a bonus (GRPOConfig.loss_is_zero_without_advantage), so this is the whole mini-batch's mean.
        loss = loss - entropy_coef * masked_mean(entropy, acts_on)
    with torch.no_grad():  # masked sums of the per-token statistics, in the order of the names, in one go
        per_token_stats = [
            mask,
            entropy.detach(),
            st["ratio"].detach().expand_as(mask),
            torch.stack([st["low_clipped"], st["high_clipped"], st["clipped"]]).float(),
        ]
        if kl is not None:
            per_token_stats.append(kl.detach())
        if cfg.use_adaptive_entropy:  # the entropy of the tokens the bonus acts on, for the controller
            per_token_stats.append(torch.stack([entropy.detach() * acts_on, acts_on.to(mask.dtype)]))
        sums = (torch.cat([t.view(-1, *mask.shape) for t in per_token_stats]) * mask).sum((1, 2))
    return loss, LossStats(names, sums)
