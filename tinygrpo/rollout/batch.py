"""Batch: one process's share of a generated batch, as tensors grouped by prompt (G consecutive rows)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Batch:
    """One process's generated completions and their advantages; rows are grouped by prompt (G consecutive rows)."""

    prompt_ids: torch.Tensor  # (P, Tp) left-padded
    prompt_mask: torch.Tensor  # (P, Tp)
    completion_ids: torch.Tensor  # (P*G, Tc)
    completion_mask: torch.Tensor  # (P*G, Tc) float; 0 after EOS (and for truncated rows if they are masked)
    advantages: torch.Tensor  # (P*G,)
    rewards: torch.Tensor  # (P*G,) combined (NaN = no applicable reward)
    # Nothing to learn from on this process: the groups are kept only so that every process runs a forward (DDP
    # needs one from each) at weight 0. Set by generation (no group with signal in any round) and by the update (a
    # mini-batch with no group to learn from here while another process has one); the loss is then exactly 0.
    no_signal: bool = False
    # (P*G,) the temperature each completion was sampled at, where some were sampled at another than the run's
    # (explore rounds, tinygrpo/rollout/generation.py); None: all at the run's temperature.
    temperature: torch.Tensor | None = None

    @property
    def num_groups(self) -> int:
        return self.prompt_ids.size(0)

    def groups(self, idx: torch.Tensor) -> Batch:
        """The sub-batch of the given group indices (the batch itself when they are all of its groups, in order)."""
        n = self.num_groups
        if idx.numel() == n and idx.tolist() == list(range(n)):  # (a list compare: one tensor op, not four)
            return self
        rows = group_rows(idx, self.completion_ids.size(0) // max(n, 1))
        return Batch(
            self.prompt_ids[idx],
            self.prompt_mask[idx],
            self.completion_ids[rows],
            self.completion_mask[rows],
            self.advantages[rows],
            self.rewards[rows],
            self.no_signal,
            None if self.temperature is None else self.temperature[rows],
        )


def group_rows(groups: torch.Tensor, G: int) -> torch.Tensor:
    """(k,) group indices -> (k*G,) their completion rows."""
    return (groups[:, None] * G + torch.arange(G, device=groups.device)).reshape(-1)


def concat_batches(parts: list[Batch], pad_id: int, temperature: float = 1.0) -> Batch:
    """Concatenate sub-batches: prompts re-padded on the left, completions on the right, to common widths.

    (Generation stops when every sequence has stopped, so rounds can differ in completion width.) `temperature`: the
    run's, for the rows of parts without a per-row temperature when another part has one.
    """
    temps = None
    if any(p.temperature is not None for p in parts):
        temps = torch.cat(
            [
                p.temperature if p.temperature is not None else torch.full((p.rewards.numel(),), temperature)
                for p in parts
            ]
        )
    Tp = max(p.prompt_ids.size(1) for p in parts)
    Tc = max(p.completion_ids.size(1) for p in parts)

    def left(t: torch.Tensor, value: int) -> torch.Tensor:
        return F.pad(t, (Tp - t.size(1), 0), value=value)

    def right(t: torch.Tensor, value: float) -> torch.Tensor:
        return F.pad(t, (0, Tc - t.size(1)), value=value)

    return Batch(
        torch.cat([left(p.prompt_ids, pad_id) for p in parts]),
        torch.cat([left(p.prompt_mask, 0) for p in parts]),
        torch.cat([right(p.completion_ids, pad_id) for p in parts]),
        torch.cat([right(p.completion_mask, 0.0) for p in parts]),
        torch.cat([p.advantages for p in parts]),
        torch.cat([p.rewards for p in parts]),
        no_signal=all(p.no_signal for p in parts),
        temperature=temps,
    )
