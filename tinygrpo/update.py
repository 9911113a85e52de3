"""The update half of GRPOTrainer: the loss of a mini-batch, the optimizer steps over a generated batch, and the
primitives they use (backward, gradient clipping, optimizer step, reductions across processes).

`PolicyUpdate` is a mixin: `GRPOTrainer` (tinygrpo/trainer.py) inherits it and sets, in its `__init__`, every
attribute used here (cfg, G, acc, scorer, policy, ref_model, grouped, the optimizer and scheduler, _plain,
_lean_step, _params, _opt, _policy_modules, _sum_names, nonfinite_skipped, step, out). The math is in core.py;
this file orchestrates it for one batch: forward, loss, backward, clip, step, and the sums the metrics need.
"""

from __future__ import annotations

import math
import warnings

import torch

from .batch import Batch
from .core import (
    aggregate_loss,
    clipped_surrogate,
    entropy_from_logits,
    full_kl,
    kl_estimate,
    selective_log_softmax,
)
from .optim import lean_adamw_step


class NonFiniteError(RuntimeError):
    """A NaN or infinite loss or gradient (on_nonfinite='stop')."""


class PolicyUpdate:
    """Loss, optimizer steps and update primitives of `GRPOTrainer` (see the module docstring)."""

    def _active_groups(self, batch: Batch) -> torch.Tensor:
        """Groups that enter the forward/backward. With beta == 0 a group whose advantages are all zero adds
        exactly zero to the loss and gradient, so it is left out (the normalisers still count it)."""
        n_groups = batch.prompt_ids.size(0)
        if not (self.cfg.skip_zero_advantage_groups and self.cfg.beta == 0):
            return torch.arange(n_groups)
        return torch.nonzero(batch.advantages.view(n_groups, self.G).ne(0).any(1)).flatten()

    def compute_loss(self, mb: Batch, active: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss of one mini-batch `mb`, computed on its `active` groups, normalised as if on all of `mb`.

        Returns the scalar loss and the masked sums of the per-token metrics (`self._sum_names`: "tokens" first,
        then entropy, ratio, clip fractions, kl; local, reduced across processes by the caller).
        """
        cfg, G = self.cfg, self.G
        n_proc = self.acc.num_processes
        total_rows = mb.completion_ids.size(0)
        total_tokens = mb.completion_mask.sum()
        # DDP needs a forward/backward on every process: with nothing to learn from, use a zero-weighted group.
        dummy = active.numel() == 0 or mb.empty
        sub = mb.groups(active if not dummy else torch.zeros(1, dtype=torch.long), G)
        logits = self.scorer(sub.prompt_ids, sub.prompt_mask, sub.completion_ids, G, sub.completion_mask,
                             self.grouped)  # (n, Tc, V); 0 at positions the mask leaves out  # fmt: skip
        logp = selective_log_softmax(logits, sub.completion_ids, cfg.temperature)  # (n, Tc)
        old = sub.old_logps  # None: on-policy (the ratio is exactly 1, see clipped_surrogate)
        mask = sub.completion_mask
        per_token, st = clipped_surrogate(
            logp, old, sub.advantages, mask, epsilon_low=cfg.epsilon, epsilon_high=cfg.epsilon_high,
            delta=cfg.delta, importance_sampling_level=cfg.importance_sampling_level,
        )  # fmt: skip
        kl = None
        if cfg.beta > 0:
            if cfg.kl_estimator == "full":
                kl = full_kl(logits, sub.ref_logits, cfg.temperature)
            else:
                kl = kl_estimate(logp, sub.ref_logps, cfg.kl_estimator)
            per_token = per_token + cfg.beta * kl
        if cfg.loss_type == "dapo":
            # DDP averages gradients over processes, so each divides by (global tokens / processes).
            global_tokens = self._reduce(total_tokens.detach(), "sum")
            loss = aggregate_loss(per_token, mask, "dapo", num_items_in_batch=(global_tokens / n_proc).clamp(min=1))
        else:
            loss = aggregate_loss(per_token, mask, cfg.loss_type, max_completion_length=cfg.max_completion_length)
            # Rescale from the active subset to the whole mini-batch (skipped groups contribute exact zeros).
            if cfg.loss_type == "bnpo":
                loss = loss * mask.sum() / total_tokens.clamp(min=1)
            else:
                loss = loss * sub.completion_ids.size(0) / total_rows
        if dummy:
            loss = loss * 0.0
        with torch.no_grad():  # masked sums of the per-token metrics, in the order of self._sum_names, in one go
            per_token_metrics = [mask, entropy_from_logits(logits.detach(), cfg.temperature),
                                 st["ratio"].detach().expand_as(mask),
                                 torch.stack([st["low_clipped"], st["high_clipped"], st["clipped"]]).float()]
            if kl is not None:
                per_token_metrics.append(kl.detach())
            sums = (torch.cat([t.view(-1, *mask.shape) for t in per_token_metrics]) * mask).sum((1, 2))
            if dummy:
                sums = sums * 0.0
        return loss, dict(zip(self._sum_names, sums.unbind(), strict=True))

    def _optimize(self, batch: Batch) -> dict[str, float]:
        """num_iterations passes x num_mini_batches optimizer steps over the generated batch."""
        cfg, G = self.cfg, self.G
        n_groups = batch.prompt_ids.size(0)
        multi = self.acc.num_processes > 1
        sums: torch.Tensor | None = None
        grad_norms, losses = [], []
        skipped_updates = 0
        self._set_training(True)
        for _ in range(cfg.num_iterations):
            for chunk in torch.arange(n_groups).tensor_split(cfg.num_mini_batches):
                mb = batch.groups(chunk, G)
                active = self._active_groups(mb) if not mb.empty else torch.zeros(0, dtype=torch.long)
                n_active = active.numel()
                if multi:
                    n_active = self._reduce(torch.tensor(float(n_active)), "sum").item()
                if n_active == 0:
                    # No group with signal on any process: no update (a zero-gradient AdamW step would still
                    # move the weights through its momentum).
                    skipped_updates += 1
                    continue
                loss, s = self.compute_loss(mb, active)
                bad = not math.isfinite(loss.item())
                if multi:
                    bad = self._reduce(torch.tensor(float(bad)), "max").item() > 0
                if bad:
                    self._nonfinite("loss")
                    continue
                self.zero_grad()
                self.backward(loss)
                gn = float(self.clip_grad_norm(cfg.max_grad_norm or float("inf")))
                if not math.isfinite(gn):
                    self.zero_grad()
                    self._nonfinite("gradient norm")
                    continue
                self.optimizer_step()
                grad_norms.append(gn)
                losses.append(loss.detach())
                vec = torch.stack(list(s.values()))  # (len(self._sum_names),)
                sums = vec if sums is None else sums + vec
        if losses:
            self.scheduler.step()
        else:  # a step without an update still advances the schedule, on purpose
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
                self.scheduler.step()
        out: dict[str, float] = {}
        if sums is not None:
            total = self._reduce(sums, "sum").tolist()
            tok = max(total[0], 1.0)  # the first sum is the token count
            out = {k: v / tok for k, v in zip(self._sum_names[1:], total[1:], strict=True)}
        if skipped_updates:
            out["skipped_updates"] = skipped_updates
        if losses:
            loss_mean = losses[0] if len(losses) == 1 else torch.stack(losses).mean()
            out["loss"] = float(self._reduce(loss_mean, "mean"))
            out["grad_norm"] = sum(grad_norms) / len(grad_norms)
        return out

    def _reduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        """accelerate's reduce ("sum", "mean", "max"); on one process the tensor itself (no per-call checks)."""
        return self.acc.reduce(t, op) if self.acc.num_processes > 1 else t

    def _gather(self, t: torch.Tensor) -> torch.Tensor:
        """accelerate's gather (concatenation over processes); on one process the tensor itself."""
        return self.acc.gather(t) if self.acc.num_processes > 1 else t

    def _set_training(self, mode: bool) -> None:
        for m in self._policy_modules:
            object.__setattr__(m, "training", mode)  # what Module.train sets, without its per-call checks

    def backward(self, loss: torch.Tensor) -> None:
        if self._plain:
            loss.backward()  # DDP's hooks still all-reduce the gradients
        else:
            self.acc.backward(loss)

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip the policy's gradients to `max_norm` (inf: measure only); returns the norm before clipping."""
        if self._plain:
            # torch.nn.utils.clip_grad_norm_'s math (norm of the per-tensor norms, coefficient max / (norm + 1e-6)),
            # without its per-call grouping, and with no multiply when the coefficient is >= 1 (torch multiplies by
            # the clamped 1.0): half its time here (~0.14 ms a step).
            grads = [p.grad for p in self._params if p.grad is not None]
            if not grads:
                return torch.tensor(0.0)
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            coef = max_norm / (norm + 1e-6)
            if coef < 1:
                torch._foreach_mul_(grads, coef)
            return norm
        return self.acc.clip_grad_norm_(self.scorer.parameters(), max_norm)

    def zero_grad(self) -> None:
        if self._plain:
            for p in self._params:  # what zero_grad(set_to_none=True) does, without its per-call machinery
                p.grad = None
        else:
            self._opt.zero_grad(set_to_none=True)

    def optimizer_step(self) -> None:
        if self._lean_step:
            lean_adamw_step(self._opt)  # the fused AdamW's own kernels on its own state, ~0.3 ms a step less
        else:
            self._opt.step()

    def _nonfinite(self, what: str) -> None:
        if self.cfg.on_nonfinite == "stop":
            raise NonFiniteError(
                f"step {self.step + 1}: the {what} is NaN or infinite; stopped (the last checkpoint in "
                f"{self.out} is intact; on_nonfinite=skip skips such steps instead)"
            )
        self.nonfinite_skipped += 1

    def _sync_ref(self) -> None:
        """TR-DPO-style reference update: ref <- alpha * policy + (1 - alpha) * ref."""
        a = self.cfg.ref_model_mixup_alpha
        policy = self.policy
        with torch.no_grad():
            for pr, pp in zip(self.ref_model.parameters(), policy.parameters(), strict=True):
                pr.mul_(1 - a).add_(pp.detach(), alpha=a)
