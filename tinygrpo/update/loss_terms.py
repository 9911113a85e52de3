"""The variants of the GRPO loss, off its plain path: each a function the loss calls only when its option is on.

    token_terms  in order, each weighting or masking the per-token loss (and narrowing the tokens the entropy
                 bonus acts on): DeepSeek-V3.2's off-policy sequence mask, the high-entropy token mask of "Beyond
                 the 80/20 rule", the explore rounds' truncated importance weights
    kl_terms     the KL to the reference, per token: a sample estimator (k1, k2, k3) or the exact one over the
                 vocabulary, with DeepSeek-V3.2's ratio correction of the estimator's gradient

The plain loss (loss.py) is the clipped surrogate plus beta times k3, aggregated over the batch's tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from tinygrpo.algorithm.core import (
    entropy_threshold,
    full_kl,
    high_entropy_mask,
    kl_estimate,
    log_importance_weights,
    off_policy_mask,
    selective_log_softmax,
)
from tinygrpo.algorithm.policy_losses import LossConfig
from tinygrpo.rollout.round import Batch

Gather = Callable[[Tensor], Tensor] | None  # concatenates a 1-D tensor over processes (None: this one only)


@dataclass
class Tokens:
    """What a token term reads of the mini-batch: (n, Tc) tensors of its completion tokens."""

    batch: Batch
    logits: Tensor  # (n, Tc, V)
    logp: Tensor  # log-probs of the sampled tokens, with autograd
    old_logps: Tensor | None  # before this batch's first update; None: on-policy
    entropy: Tensor
    advantages: Tensor  # (n,)
    temperature: float  # the run's: the log-probs are taken at it


def explore_weights(logits: Tensor, sub: Batch, logp: Tensor, cfg: LossConfig, temperature: float) -> Tensor:
    """(n, Tc) truncated importance weights of the tokens of rows sampled at another temperature; exactly 1 on the
    rows sampled at the run's temperature."""
    t = sub.temperature.to(logits.device, logits.dtype)  # (n,)
    behaviour = selective_log_softmax(logits / t[:, None, None], sub.completion_ids)  # (n, Tc)
    w = torch.exp(logp - behaviour).clamp(max=cfg.explore_importance_sampling_clip_max)
    return torch.where((t == temperature)[:, None], torch.ones_like(w), w)


def off_policy(per_token: Tensor, acts_on: Tensor, x: Tokens, cfg: LossConfig, gather: Gather):
    """Completions with a negative advantage the policy has moved away from leave the loss (off_policy_mask_threshold)."""
    mask = x.batch.completion_mask
    return per_token * off_policy_mask(
        x.advantages, x.logp, x.old_logps, mask, cfg.off_policy_mask_threshold
    ), acts_on


def high_entropy(per_token: Tensor, acts_on: Tensor, x: Tokens, cfg: LossConfig, gather: Gather):
    """Only the tokens among the top top_entropy_quantile of entropy (pooled over every process) are trained on."""
    pool = x.entropy.detach()[acts_on]
    threshold = entropy_threshold(gather(pool) if gather else pool, cfg.top_entropy_quantile)
    acts_on = high_entropy_mask(x.entropy.detach(), x.batch.completion_mask, threshold)
    return per_token * acts_on, acts_on


def explore_importance(per_token: Tensor, acts_on: Tensor, x: Tokens, cfg: LossConfig, gather: Gather):
    """Tokens sampled at another temperature T' (explore rounds): truncated importance weights min(pi_T(y) /
    pi_T'(y), C) bring them back to the policy's temperature (TIS, Yao et al. 2025)."""
    return per_token * explore_weights(
        x.logits.detach(), x.batch, x.logp.detach(), cfg, x.temperature
    ), acts_on


TokenTerm = Callable[[Tensor, Tensor, Tokens, LossConfig, Gather], tuple[Tensor, Tensor]]


def token_terms(cfg: LossConfig, batch: Batch) -> list[TokenTerm]:
    """The token terms that apply to this mini-batch, in the order they are applied: (per_token, acts_on) ->
    (per_token, acts_on). A new term is a function above and its line here."""
    terms: list[TokenTerm] = []
    if cfg.off_policy_mask_threshold is not None:
        terms.append(off_policy)
    if cfg.top_entropy_quantile < 1:
        terms.append(high_entropy)
    if batch.temperature is not None and cfg.explore_importance_sampling_correction:
        terms.append(explore_importance)
    return terms


def kl_terms(
    logits: Tensor,
    logp: Tensor,
    old_logps: Tensor | None,
    ref_logps,
    ref_logits,
    mask: Tensor,
    cfg: LossConfig,
    temperature: float,
):
    """(kl, what the loss adds per token before beta): the per-token KL to the reference by kl_estimator, and the
    same times the ratio with use_bias_correction_kl. The ratio keeps its gradient (exactly 1 in value on-policy):
    E_old[r * k] = E_pi[k], and its gradient adds k * grad log pi, the score term the reverse KL's gradient needs
    (DeepSeek-V3.2). The exact per-position KL ("full") depends on no sampled token at its position: nothing to
    correct there."""
    if cfg.kl_estimator == "full":
        return (kl := full_kl(logits, ref_logits, temperature)), kl
    kl = kl_estimate(logp, ref_logps, cfg.kl_estimator)
    if not cfg.use_bias_correction_kl:
        return kl, kl
    old = logp.detach() if old_logps is None else old_logps
    return kl, kl * torch.exp(log_importance_weights(logp, old, mask, cfg.importance_sampling_level))
