"""The GRPO loss of one mini-batch, from the policy's logits: a pure function over tensors and a LossConfig.

    logits -> log-probs of the sampled tokens -> the clipped surrogate of the ratio to the policy that sampled
           [x the token terms of the variants that are on (loss_terms.token_terms)]
           + beta * the per-token KL to the reference (loss_terms.kl_terms)
           -> aggregated by loss_type (dapo: over the batch's tokens) [- entropy_coef * mean entropy]
           -> (loss, statistics)

Plain GRPO is the lines without brackets, with k3 for the KL (nano_grpo.py writes them out). The policy loss is
looked up by loss_type in tinygrpo.algorithm.policy_losses.POLICY_LOSSES; every formula is a function of
tinygrpo.algorithm. The loss reads a LossConfig (tinygrpo/algorithm/policy_losses.py) and the sampling's
temperature and length (SamplingParams: the log-probs are taken at the temperature). What this file adds is the
bookkeeping around a mini-batch whose zero-advantage groups were left out of the forward: the loss of the groups
that were run is normalised as if the whole mini-batch had been (their loss terms are exactly zero), so skipping
them changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from tinygrpo.algorithm.core import aggregate_loss, entropy_from_logits, masked_mean, selective_log_softmax
from tinygrpo.algorithm.policy_losses import POLICY_LOSSES, LossConfig
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.round import Batch
from tinygrpo.update.loss_terms import Tokens, kl_terms, token_terms
from tinygrpo.update.loss_terms import explore_weights as explore_weights  # (importable from here, as before)

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
    sampling: SamplingParams,
    num_items_in_batch: Tensor | None = None,
    *,
    entropy_coef: float = 0.0,
    gather: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, LossStats]:
    """Scalar loss of one mini-batch and its token statistics. logits: (n, Tc, V) of `inputs.batch`, scored at
    `sampling`'s temperature (dr_grpo's constant is its max_completion_length).

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
    T = sampling.temperature
    logp = selective_log_softmax(logits, sub.completion_ids, T)  # (n, Tc)
    # (n, Tc). With an entropy bonus the entropy is differentiated; otherwise it is a statistic (and a token mask).
    entropy = entropy_from_logits(logits if cfg.entropy_bonus else logits.detach(), T)
    advantages = sub.advantages.to(logp.device)  # (rewards and advantages live on the CPU)
    # The policy loss: the clipped surrogate of the ratio to the policy that sampled (or loss_type's variant).
    policy_loss = POLICY_LOSSES[cfg.loss_type]
    per_token, st = policy_loss.fn(logp, inputs.old_logps, advantages, mask, cfg)
    acts_on = mask.bool()  # the tokens the policy loss (and the entropy bonus) act on
    tokens = Tokens(sub, logits, logp, inputs.old_logps, entropy, advantages, T)
    for term in token_terms(cfg, sub):  # (variants that weight or mask tokens: none in plain GRPO)
        per_token, acts_on = term(per_token, acts_on, tokens, cfg, gather)
    kl = None
    if cfg.kl_in_loss:  # + beta * the per-token KL to the reference (k3 in plain GRPO)
        kl, kl_term = kl_terms(
            logits, logp, inputs.old_logps, inputs.ref_logps, inputs.ref_logits, mask, cfg, T
        )
        per_token = per_token + cfg.beta * kl_term
    loss = aggregate(
        per_token, mask, inputs, policy_loss.aggregation, sampling.max_completion_length, num_items_in_batch
    )
    if entropy_coef:
        # The mean entropy of the tokens the loss acts on, whatever the loss type (TRL): groups are never skipped
        # with a bonus (GRPOConfig.loss_is_zero_without_advantage), so this is the whole mini-batch's mean.
        loss = loss - entropy_coef * masked_mean(entropy, acts_on)
    return loss, LossStats(
        names, token_sums(mask, entropy, st, kl, acts_on if cfg.use_adaptive_entropy else None)
    )


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    inputs: LossInputs,
    aggregation: str,
    max_completion_length: int,
    num_items: Tensor | None,
) -> Tensor:
    """The per-token loss reduced by the loss type's aggregation (core.aggregate_loss), over the whole mini-batch:
    the groups left out of the forward contribute exact zeros, and the normaliser counts them."""
    if aggregation == "dapo":
        return aggregate_loss(per_token, mask, "dapo", num_items_in_batch=num_items)
    loss = aggregate_loss(per_token, mask, aggregation, max_completion_length=max_completion_length)
    if aggregation == "bnpo":
        return loss * mask.sum() / inputs.tokens.clamp(min=1)
    return loss * inputs.batch.completion_ids.size(0) / inputs.rows


@torch.no_grad()
def token_sums(mask: Tensor, entropy: Tensor, st: dict, kl: Tensor | None, bonus_on: Tensor | None) -> Tensor:
    """Masked sums of the per-token statistics, in the order of the names (STAT_NAMES, kl, ENTROPY_STATS), in one
    go; `bonus_on`: the tokens the entropy bonus acts on, for its adaptive controller."""
    per_token_stats = [
        mask,
        entropy.detach(),
        st["ratio"].detach().expand_as(mask),
        torch.stack([st["low_clipped"], st["high_clipped"], st["clipped"]]).float(),
    ]
    if kl is not None:
        per_token_stats.append(kl.detach())
    if bonus_on is not None:
        per_token_stats.append(torch.stack([entropy.detach() * bonus_on, bonus_on.to(mask.dtype)]))
    return (torch.cat([t.view(-1, *mask.shape) for t in per_token_stats]) * mask).sum((1, 2))
