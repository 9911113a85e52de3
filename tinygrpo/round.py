"""One generation round on one process, and how rounds of one step combine into groups.

A rule that samples a prompt in several passes (sample_allocation screen: a few samples first, more where they
differ) gets each pass as a Round of its own; `merged` puts a prompt's rows from every pass together, so that the
round reads as if each group had been sampled at once (its rows consecutive, tinygrpo/group_sizes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .batch import Batch


@dataclass
class Round:
    """One generation round on this process: U completions of each of its P prompt rows, decoded and scored; then
    their advantages (over the global batch for a round at the run's temperature, within the round for an explore
    round). U is G, or allocation_unit when a prompt gets several rows (`sizes`, tinygrpo/group_sizes.py)."""

    idx: list[int]  # (P,) training-prompt index of each prompt row
    prompt_ids: torch.Tensor  # (P, Tp) left-padded
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # (n, Tc), n = P * U
    completion_mask: torch.Tensor  # (n, Tc) float; 0 after EOS (and on truncated rows if they are masked)
    is_eos: torch.Tensor  # (n,) bool: ended with EOS (not truncated)
    lengths: torch.Tensor  # (n,) tokens per completion, EOS included
    prompts: list[str]  # (n,) the prompt of each completion
    completions: list[str]  # (n,) decoded, <eos> kept
    rewards_per_func: torch.Tensor  # (n, F) float32, NaN = the function returned None
    rewards: torch.Tensor  # (n,) combined
    seconds_generate: float
    seconds_reward: float
    greedy_rewards: torch.Tensor | None = None  # (P,) the greedy answer's reward (an estimator that needs it)
    kl: torch.Tensor | None = None  # (n,) summed k1 to the reference over each completion (use_kl_in_reward)
    sizes: list[int] | None = None  # prompt rows of each group, consecutive (None: one each, a group of U)
    # Set once the advantages are known (BatchGenerator.round):
    advantages: torch.Tensor | None = None  # (n,) this process's rows
    all_rewards: torch.Tensor | None = None  # (N,) combined rewards of every process's completions
    zero_std: torch.Tensor | None = None  # every process's groups: all valid rewards equal (no signal)
    all_sizes: list[int] | None = None  # every process's groups' sizes (None: one prompt row each)
    has_signal: torch.Tensor | None = None  # (P,) this process's prompt rows whose group is not zero_std
    row_counts: list[int] | None = None  # every process's completions, where they may differ (sizes set)

    def gather(self, procs, t: torch.Tensor) -> torch.Tensor:
        """Every process's rows of a per-completion tensor of this round, in rank order."""
        return procs.gather(t) if self.row_counts is None else procs.gather_rows(t, self.row_counts)

    def shaped_rewards(self, beta: float) -> torch.Tensor:
        """The rewards the advantages see: less beta x the summed KL with use_kl_in_reward."""
        return self.rewards if self.kl is None else self.rewards - beta * self.kl

    @property
    def batch(self) -> Batch:
        """The round as the update sees it (P groups; advantages as set)."""
        return Batch(
            self.prompt_ids,
            self.prompt_mask,
            self.completion_ids,
            self.completion_mask,
            self.advantages,
            self.rewards,
        )


def merged(first: Round, more: Round, extra: list[int], pad_id: int) -> Round:
    """`first` (one prompt row per prompt, sizes None) and `more` (prompt rows for some of its prompts: first's
    prompt j gets extra[j] rows, in order) as one round whose group j is first's row j, then its rows of `more`.
    Prompts are re-padded on the left and completions on the right to common widths. Before any advantages."""
    U = first.completion_ids.size(0) // len(first.idx)
    P = len(first.idx)
    order, at = [], P
    for j, k in enumerate(extra):
        order += [j, *range(at, at + k)]
        at += k
    units = torch.tensor(order)
    rows = (units[:, None] * U + torch.arange(U)).reshape(-1)
    Tp = max(first.prompt_ids.size(1), more.prompt_ids.size(1))
    Tc = max(first.completion_ids.size(1), more.completion_ids.size(1))

    def cat(
        a: torch.Tensor | None, b: torch.Tensor | None, sel: torch.Tensor, pad=None
    ) -> torch.Tensor | None:
        if a is None:
            return None
        if pad is not None:
            side, width, value = pad
            a, b = (
                F.pad(t, (width - t.size(1), 0) if side == "left" else (0, width - t.size(1)), value=value)
                for t in (a, b)
            )
        return torch.cat([a, b])[sel]

    def lst(a: list, b: list, sel: torch.Tensor) -> list:
        both = a + b
        return [both[i] for i in sel.tolist()]

    return Round(
        lst(first.idx, more.idx, units),
        cat(first.prompt_ids, more.prompt_ids, units, ("left", Tp, pad_id)),
        cat(first.prompt_mask, more.prompt_mask, units, ("left", Tp, 0)),
        cat(first.completion_ids, more.completion_ids, rows, ("right", Tc, pad_id)),
        cat(first.completion_mask, more.completion_mask, rows, ("right", Tc, 0.0)),
        cat(first.is_eos, more.is_eos, rows),
        cat(first.lengths, more.lengths, rows),
        lst(first.prompts, more.prompts, rows),
        lst(first.completions, more.completions, rows),
        cat(first.rewards_per_func, more.rewards_per_func, rows),
        cat(first.rewards, more.rewards, rows),
        first.seconds_generate + more.seconds_generate,
        first.seconds_reward + more.seconds_reward,
        cat(first.greedy_rewards, more.greedy_rewards, units),
        cat(first.kl, more.kl, rows),
        [1 + k for k in extra],
    )
