"""The update of one generated batch: num_iterations passes x num_mini_batches optimizer steps.

    batch -> mini-batches (whole groups) -> the groups that are run (groups whose advantages are all zero add exactly
    nothing when the loss has no KL or entropy term, and are then left out) -> one layout each -> reference / old log-probs, once, before any
    update -> for each pass and mini-batch: policy logits -> grpo_loss -> backward -> clip -> AdamW step

The loss is `tinygrpo.update.loss.grpo_loss`; the optimizer calls are `tinygrpo.update.optim.OptimizerStep`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn as nn

from tinygrpo.algorithm.core import at_least_float32, selective_log_softmax
from tinygrpo.algorithm.policy_losses import POLICY_LOSSES, LossConfig
from tinygrpo.base.processes import Processes
from tinygrpo.model.backend import Backend
from tinygrpo.model.static_shapes import replayed
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.round import Batch
from tinygrpo.update.config import BatchConfig, OptimizerConfig
from tinygrpo.update.loss import EntropyCoefficient, LossInputs, LossStats, grpo_loss
from tinygrpo.update.optim import OptimizerStep


class NonFiniteError(RuntimeError):
    """A NaN or infinite loss or gradient (on_nonfinite='stop'), or weights that became so (never saved)."""


def nonfinite_weight(model: nn.Module) -> str | None:
    """The name of the first parameter that holds a NaN or infinite value, or None. The one guard of both entry
    points: non-finite weights are never saved (GRPO checks before every checkpoint, SFT before it saves the model)."""
    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            return name
    return None


@dataclass
class MiniBatch:
    """A mini-batch ready for the update passes: what the loss needs, and the layout of its policy forward."""

    inputs: (
        LossInputs  # inputs.batch.no_signal: nothing to learn from on this process (a forward for DDP only)
    )
    layout: Any  # the backend's layout of inputs.batch, shared by every pass


@dataclass
class UpdateStats:
    """What the update did, over all processes."""

    updates: int  # optimizer steps taken
    skipped_updates: int  # mini-batches in which no process had a group to learn from
    nonfinite_skipped: int  # steps skipped for a NaN/inf loss or gradient (on_nonfinite="skip")
    loss: float | None  # mean over the updates (None: no update)
    grad_norm: float | None  # mean gradient norm before clipping
    token_means: dict[str, float]  # per-token means over the tokens that were run (entropy, ratio, clip, kl)


class PolicyUpdate:
    """Runs the update passes of a generated batch on the policy (see the module docstring). Owns the entropy
    bonus's adaptive coefficient (state_dict); the optimizer and its schedule are the OptimizerStep's."""

    def __init__(
        self,
        loss: LossConfig,
        sampling: SamplingParams,
        batches: BatchConfig,
        optimizer_cfg: OptimizerConfig,
        unit: int,
        policy: nn.Module,
        model: nn.Module,
        ref_model: nn.Module | None,
        backend: Backend,
        optimizer: OptimizerStep,
        processes: Processes,
    ) -> None:
        self.loss_cfg, self.sampling, self.optimizer_cfg = loss, sampling, optimizer_cfg
        # (what the batches' options decide, once: the step reads these)
        self.mini_batches, self.iterations, self.needs_old = (
            batches.mini_batches,
            batches.num_iterations,
            batches.needs_old_logps,
        )
        self.dapo = (
            POLICY_LOSSES[loss.loss_type].aggregation == "dapo"
        )  # (its normaliser: the global batch's tokens)
        self.policy = policy  # the prepared (possibly DDP-wrapped) PolicyForward: one call per backward
        self.model = model  # the bare policy model, for no-grad forwards
        self.ref_model = ref_model
        self.backend = backend
        self.opt = optimizer
        self.procs = processes
        self.G = unit  # completions per prompt row (each group is one or more rows: tinygrpo/algorithm/group_sizes.py)
        self.entropy_coef = EntropyCoefficient(loss.entropy_coef)

    def state_dict(self) -> dict:
        return {"entropy_coef": self.entropy_coef.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.entropy_coef.load_state_dict(state["entropy_coef"])

    def active_groups(self, batch: Batch) -> torch.Tensor:
        """Groups that enter the forward/backward (ascending). Without a KL or entropy term a group whose advantages
        are all zero adds exactly zero to the loss and its gradient, so it is left out (the normalisers still count
        it)."""
        if batch.no_signal:
            return torch.zeros(0, dtype=torch.long)
        if not (self.loss_cfg.skip_zero_advantage_groups and self.loss_cfg.loss_is_zero_without_advantage):
            return torch.arange(batch.num_groups)
        return torch.nonzero(batch.advantages.view(batch.num_groups, self.G).ne(0).any(1)).flatten()

    def prepare(self, batch: Batch) -> list[MiniBatch]:
        """Split a batch into mini-batches of whole groups, keep the groups that are run, build their layouts, and
        compute the reference and old log-probs of all of them in one forward each, before any update."""
        G = self.G
        active = self.active_groups(batch)  # ascending, so each mini-batch's active groups are a run of them
        train = batch.groups(active)
        bounds = split_groups(batch.num_groups, self.mini_batches)
        one = len(bounds) == 1
        needs_logps = self.ref_model is not None or self.needs_old
        train_layout = self._layout(train) if active.numel() and (one or needs_logps) else None
        ref_logps, ref_logits, old_logps = self._reference_and_old(train, train_layout)

        act = active.tolist()
        out = []
        for start, stop in bounds:
            lo, hi = bisect_left(act, start), bisect_left(act, stop)  # this mini-batch's groups in `train`
            whole = batch.completion_mask[start * G : stop * G]  # the mini-batch, skipped groups included
            if hi == lo:
                # Nothing to learn from here; if another process has something, DDP still needs a forward.
                out.append(self._dummy(batch, start, whole))
                continue
            rows = slice(lo * G, hi * G)
            inputs = LossInputs(
                train if one else train.groups(torch.arange(lo, hi)),
                rows=whole.size(0),
                tokens=whole.sum(),
                old_logps=None if old_logps is None else old_logps[rows],
                ref_logps=None if ref_logps is None else ref_logps[rows],
                ref_logits=None if ref_logits is None else ref_logits[rows],
            )
            out.append(MiniBatch(inputs, train_layout if one else self._layout(inputs.batch)))
        return out

    def _dummy(self, batch: Batch, start: int, whole: torch.Tensor) -> MiniBatch:
        """One group marked no_signal (weight 0); its layout is built only if it is run. Its rows and tokens are the
        whole mini-batch's (`whole`, its completion mask): the dapo normaliser sums every process's tokens, and this
        process's count as much as when one of its groups has signal."""
        sub = replace(batch.groups(torch.tensor([min(start, batch.num_groups - 1)])), no_signal=True)
        return MiniBatch(LossInputs(sub, rows=whole.size(0), tokens=whole.sum()), None)

    def run(self, minibatches: list[MiniBatch]) -> UpdateStats:
        """The update passes. Raises NonFiniteError for a NaN/inf loss or gradient when on_nonfinite is "stop"."""
        procs = self.procs
        stats: LossStats | None = None
        grad_norms, losses = [], []
        skipped_updates = nonfinite = 0
        if not self.model.training:  # (checked first: a mode switch walks every module)
            self.policy.train()
        for _ in range(self.iterations):
            for mb in minibatches:
                if not procs.any(not mb.inputs.batch.no_signal):
                    # No group with signal on any process: no update (a zero-gradient AdamW step would still move
                    # the weights through its momentum).
                    skipped_updates += 1
                    continue
                loss, s = self.loss(mb)
                if procs.any(not math.isfinite(loss.item())):
                    nonfinite += self._nonfinite("loss")
                    continue
                self.opt.zero_grad()
                self.opt.backward(loss)
                gn = self.opt.clip(self.optimizer_cfg.max_grad_norm or float("inf"))
                if not math.isfinite(gn):
                    self.opt.zero_grad()
                    nonfinite += self._nonfinite("gradient norm")
                    continue
                self.opt.step()
                if self.loss_cfg.use_adaptive_entropy:
                    self.entropy_coef.update(
                        s.bonus_entropy(procs.reduce(s.sums, "sum").tolist()), self.loss_cfg
                    )
                grad_norms.append(gn)
                losses.append(loss.detach())
                stats = s if stats is None else stats + s
        self.opt.schedule(updated=bool(losses))
        loss_mean = None
        if losses:
            loss_mean = float(
                procs.reduce(losses[0] if len(losses) == 1 else torch.stack(losses).mean(), "mean")
            )
        return UpdateStats(
            updates=len(losses),
            skipped_updates=skipped_updates,
            nonfinite_skipped=nonfinite,
            loss=loss_mean,
            grad_norm=sum(grad_norms) / len(grad_norms) if grad_norms else None,
            token_means={} if stats is None else stats.means(procs.reduce(stats.sums, "sum").tolist()),
        )

    def loss(self, mb: MiniBatch) -> tuple[torch.Tensor, LossStats]:
        """The policy's forward on a mini-batch and its loss (with autograd)."""
        logits = self.policy(mb.layout if mb.layout is not None else self._layout(mb.inputs.batch))
        num_items = (
            None  # dapo (cispo, vespo): the global batch's tokens over the processes (DDP averages gradients)
        )
        if self.dapo:
            num_items = (self.procs.reduce(mb.inputs.tokens.detach(), "sum") / self.procs.num).clamp(min=1)
        coef = self.entropy_coef.applied(self.loss_cfg) if self.loss_cfg.entropy_bonus else 0.0
        return grpo_loss(
            logits,
            mb.inputs,
            self.loss_cfg,
            self.sampling,
            num_items,
            entropy_coef=coef,
            gather=self.procs.gather_varlen,
        )

    def _layout(self, sub: Batch) -> Any:
        return self.backend.layout(
            self.model, sub.prompt_ids, sub.prompt_mask, sub.completion_ids, self.G, sub.completion_mask
        )

    @torch.inference_mode()
    def _reference_and_old(self, train: Batch, layout: Any) -> tuple[torch.Tensor | None, ...]:
        """The reference's log-probs (and logits for the exact KL), and the policy's before any update."""
        T = self.sampling.temperature
        ref_logps = ref_logits = old_logps = None
        if layout is None or not (self.ref_model is not None or self.needs_old):
            return ref_logps, ref_logits, old_logps
        with replayed(self.backend):  # (cuda_graphs: each a captured forward, replayed)
            if self.ref_model is not None:
                logits = self.backend.logits(self.ref_model, layout)
                ref_logps = selective_log_softmax(logits, train.completion_ids, T)
                if self.loss_cfg.kl_estimator == "full":
                    ref_logits = at_least_float32(logits)  # (a float64 run's stay float64)
            if self.needs_old:
                logits = self.backend.logits(self.model, layout)
                old_logps = selective_log_softmax(logits, train.completion_ids, T)
        return ref_logps, ref_logits, old_logps

    def _nonfinite(self, what: str) -> int:
        if self.optimizer_cfg.on_nonfinite == "stop":
            raise NonFiniteError(f"the {what} is NaN or infinite")
        return 1


@torch.no_grad()
def mix_reference(ref_model: nn.Module, model: nn.Module, alpha: float) -> None:
    """TR-DPO's reference update (sync_ref_model): ref <- alpha * policy + (1 - alpha) * ref, in place."""
    for pr, pp in zip(ref_model.parameters(), model.parameters(), strict=True):
        pr.mul_(1 - alpha).add_(pp.detach(), alpha=alpha)


def split_groups(n: int, k: int) -> list[tuple[int, int]]:
    """[start, stop) of k consecutive mini-batches of n groups, the first n % k one group larger (torch's
    tensor_split); a mini-batch may be empty when dynamic sampling found fewer than k groups."""
    q, r = divmod(n, k)
    starts = [i * q + min(i, r) for i in range(k + 1)]
    return list(zip(starts[:-1], starts[1:], strict=True))
