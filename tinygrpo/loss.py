"""The GRPO loss of one mini-batch, from the policy's logits: a pure function over tensors and the config.

    logits -> log-probs of the sampled tokens -> clipped surrogate (ratio to the old policy)
           [+ beta * per-token KL to the reference] -> aggregate by loss_type -> (loss, statistics)

Each arrow is a function of `tinygrpo.core`. What this file adds is the bookkeeping around a mini-batch whose
zero-advantage groups were left out of the forward: the loss of the groups that were run is normalised as if the
whole mini-batch had been (their loss terms are exactly zero), so skipping them changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .batch import Batch
from .config import GRPOConfig
from .core import (
    aggregate_loss,
    clipped_surrogate,
    entropy_from_logits,
    full_kl,
    kl_estimate,
    selective_log_softmax,
)

# The per-token statistics a loss reports, as masked sums ("tokens" first: divide by it for means).
STAT_NAMES = ("tokens", "entropy", "ratio", "clip_ratio/low", "clip_ratio/high", "clip_ratio/region")


@dataclass
class LossInputs:
    """A mini-batch as the loss sees it: the groups that are run, and how to normalise their loss."""

    batch: Batch  # the groups that enter the forward/backward
    rows: int  # completions in the whole mini-batch, skipped groups included
    tokens: Tensor  # () completion tokens in the whole mini-batch, skipped groups included
    old_logps: Tensor | None = None  # (n, Tc) log-probs before this batch's first update; None = on-policy
    ref_logps: Tensor | None = None  # (n, Tc) the reference's (beta > 0)
    ref_logits: Tensor | None = None  # (n, Tc, V) the reference's, for kl_estimator="full"
    # Nothing to learn from on this process; run only because DDP needs a forward on every process: weight 0.
    dummy: bool = False


@dataclass
class LossStats:
    """Masked sums of per-token statistics (this process's tokens); `means()` after reducing over processes."""

    names: tuple[str, ...]
    sums: Tensor  # (len(names),)

    def __add__(self, other: LossStats) -> LossStats:
        return LossStats(self.names, self.sums + other.sums)

    def means(self, sums: list[float]) -> dict[str, float]:
        tokens = max(sums[0], 1.0)
        return {k: v / tokens for k, v in zip(self.names[1:], sums[1:], strict=True)}


def explore_weights(logits: Tensor, sub: Batch, logp: Tensor, cfg: GRPOConfig) -> Tensor:
    """(n, Tc) truncated importance weights of the tokens of rows sampled at another temperature; exactly 1 on the
    rows sampled at the run's temperature."""
    t = sub.temperature.to(logits.dtype)  # (n,)
    behaviour = selective_log_softmax(logits / t[:, None, None], sub.completion_ids)  # (n, Tc)
    w = torch.exp(logp - behaviour).clamp(max=cfg.explore_importance_sampling_clip_max)
    return torch.where((t == cfg.temperature)[:, None], torch.ones_like(w), w)


def grpo_loss(
    logits: Tensor, inputs: LossInputs, cfg: GRPOConfig, num_items_in_batch: Tensor | None = None
) -> tuple[Tensor, LossStats]:
    """Scalar loss of one mini-batch and its token statistics. logits: (n, Tc, V) of `inputs.batch`.

    num_items_in_batch (loss_type "dapo"): the normaliser, the completion tokens of the GLOBAL batch divided by the
    number of processes (DDP averages the processes' gradients, so their losses must add up to a global mean).
    """
    if inputs.dummy:  # a forward that DDP needs, and a zero loss: every parameter gets an exact zero gradient
        names = STAT_NAMES + (("kl",) if cfg.beta > 0 else ())
        return logits.sum() * 0.0, LossStats(names, logits.new_zeros(len(names)))
    sub = inputs.batch
    mask = sub.completion_mask
    logp = selective_log_softmax(logits, sub.completion_ids, cfg.temperature)  # (n, Tc)
    per_token, st = clipped_surrogate(
        logp,
        inputs.old_logps,  # None: on-policy, the ratio is exactly 1 (see clipped_surrogate)
        sub.advantages,
        mask,
        epsilon_low=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        delta=cfg.delta,
        importance_sampling_level=cfg.importance_sampling_level,
    )
    if sub.temperature is not None and cfg.explore_importance_sampling_correction:
        # Tokens sampled at another temperature T' (explore rounds): truncated importance weights
        # min(pi_T(y) / pi_T'(y), C) bring them back to the policy's temperature (TIS, Yao et al. 2025).
        per_token = per_token * explore_weights(logits.detach(), sub, logp.detach(), cfg)
    kl = None
    if cfg.beta > 0:
        if cfg.kl_estimator == "full":
            kl = full_kl(logits, inputs.ref_logits, cfg.temperature)
        else:
            kl = kl_estimate(logp, inputs.ref_logps, cfg.kl_estimator)
        per_token = per_token + cfg.beta * kl
    if cfg.loss_type == "dapo":
        loss = aggregate_loss(per_token, mask, "dapo", num_items_in_batch=num_items_in_batch)
    else:
        loss = aggregate_loss(per_token, mask, cfg.loss_type, max_completion_length=cfg.max_completion_length)
        # From the groups that were run to the whole mini-batch (the skipped ones contribute exact zeros).
        if cfg.loss_type == "bnpo":
            loss = loss * mask.sum() / inputs.tokens.clamp(min=1)
        else:
            loss = loss * sub.completion_ids.size(0) / inputs.rows
    with torch.no_grad():  # masked sums of the per-token statistics, in the order of the names, in one go
        per_token_stats = [
            mask,
            entropy_from_logits(logits.detach(), cfg.temperature),
            st["ratio"].detach().expand_as(mask),
            torch.stack([st["low_clipped"], st["high_clipped"], st["clipped"]]).float(),
        ]
        if kl is not None:
            per_token_stats.append(kl.detach())
        sums = (torch.cat([t.view(-1, *mask.shape) for t in per_token_stats]) * mask).sum((1, 2))
    return loss, LossStats(STAT_NAMES + (("kl",) if kl is not None else ()), sums)
