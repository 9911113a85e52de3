"""Rounds beyond the first, for groups without signal (the variants that add them; the plain run has none):

    explore rounds (Reinforce-Ada with a temperature schedule): prompts whose G samples all scored the same and below
        the batch's best are sampled again at higher temperatures, until their group has signal (bounded)
    dynamic sampling (DAPO): the groups without signal are dropped, and fresh prompts' rounds refill the batch (at
        most max_dynamic_sampling_rounds)

`Refill(generator)(first)` is the step's ScoredBatch: the groups the update trains on, and the first round, which
describes the step (refills and explore rounds are chosen for their signal and would bias it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import torch

from tinygrpo.algorithm.group_sizes import group_reduce, group_starts, rows_of
from tinygrpo.base.processes import Processes
from tinygrpo.rollout.config import RolloutConfig
from tinygrpo.rollout.round import Batch, Round, ScoredBatch, concat_batches


class Rounds(Protocol):
    """What Refill is handed to sample with (BatchGenerator is one)."""

    def round(self) -> Round:
        """The next prompts, sampled, scored, with their advantages over every process's round."""

    def sample(self, idx: list[int], temperature: float, sizes: list[int] | None = None) -> Round:
        """U completions of each of this process's prompts `idx` at `temperature`, scored."""

    def estimate(
        self,
        rewards: torch.Tensor,
        s: Round,
        scale_rewards: str,
        gather: Callable = ...,
        sizes: list[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The advantages of `rewards` (of `s`'s groups of `sizes` rows) and each group's zero_std."""


class Refill:
    def __init__(
        self,
        rounds: Rounds,
        cfg: RolloutConfig,
        temperature: float,
        target: int,
        procs: Processes,
        pad_id: int,
        scale_rewards: str,
    ) -> None:
        """`target`: the prompt rows a step trains on (P, or the P x G / allocation_unit units of a rule that gives
        prompts several), whatever the first round sampled (a screen samples fewer); `temperature`: the run's;
        `scale_rewards`: the run's (an explore round's advantages are computed within it: "batch" is "group" there)."""
        self.rounds, self.cfg, self.temperature, self.target, self.procs = (
            rounds,
            cfg,
            temperature,
            target,
            procs,
        )
        self.pad_id, self.scale = pad_id, "group" if scale_rewards == "batch" else scale_rewards

    def __call__(self, first: Round) -> ScoredBatch:
        """The step's batch from its first round (scored, advantages set): itself when neither variant is on."""
        cfg, procs, target = self.cfg, self.procs, self.target
        if not (
            cfg.explore_rounds or cfg.dynamic_sampling
        ):  # plain GRPO: the first round is the step's batch
            seconds = (first.seconds_generate, first.seconds_reward)
            return ScoredBatch(first.batch, first, len(first.all_rewards), None, *seconds)
        rounds = [first]
        explored: list[Round] = []  # the explore rounds (this process's)
        # Dynamic sampling keeps only the groups with signal; without it the whole first batch is trained on.
        kept = (
            first.batch.groups(torch.nonzero(first.has_signal).flatten())
            if cfg.dynamic_sampling
            else first.batch
        )
        parts, have = [kept], kept.num_groups
        if cfg.explore_rounds:
            found, explored = self.explore(first)
            parts += found
            have += sum(f.num_groups for f in found)
        for _ in range(cfg.max_dynamic_sampling_rounds if cfg.dynamic_sampling else 0):
            if not procs.any(have < target):  # every process is full
                break
            r = self.rounds.round()
            rounds.append(r)
            sel = signal_rows(r, max(0, target - have))
            parts.append(r.batch.groups(sel))
            have += sel.numel()
        if have == 0:  # nothing with signal in any round: one group, kept for DDP's forward (no_signal)
            parts = [replace(first.batch.groups(torch.zeros(1, dtype=torch.long)), no_signal=True)]
        parts = [p for p in parts if p.num_groups]
        batch = concat_batches(parts, self.pad_id, self.temperature) if len(parts) > 1 else parts[0]
        timed = [*rounds, *explored]
        return ScoredBatch(
            batch=batch,
            first=first,
            num_sampled=sum(len(r.all_rewards) for r in rounds)
            + (int(procs.sum(sum(s.rewards.numel() for s in explored))) if cfg.explore_rounds else 0),
            refill_rounds=len(rounds) - 1 if cfg.dynamic_sampling else None,
            seconds_generate=sum(r.seconds_generate for r in timed),
            seconds_reward=sum(r.seconds_reward for r in timed),
        )

    def explore(self, first: Round) -> tuple[list[Batch], list[Round]]:
        """Adaptive resampling of failed prompts (Reinforce-Ada, Xiong et al. 2025, with a temperature schedule):
        a prompt of the first round whose G samples all scored the same and below the batch's best is sampled again,
        G at a time at the next of `explore_temperatures`, until a round gives it a group whose rewards differ (that
        group is trained on, its advantages computed within the group) or the temperatures are used up. Local to
        this process: each process explores its own prompts. Returns the groups found and each round's samples."""
        cfg = self.cfg
        G, U = cfg.num_generations, cfg.unit
        best = float(first.all_rewards.nan_to_num(float("-inf")).max())
        top = group_reduce(first.rewards.nan_to_num(float("-inf")), first.sizes, U, "amax")  # (groups,)
        heads = torch.arange(len(first.idx)) if first.sizes is None else group_starts(first.sizes, 1)
        todo = torch.nonzero(
            ~first.has_signal[heads] & (top < best)
        ).flatten()  # this process's failed groups
        idx = [first.idx[i] for i in heads[todo].tolist()]
        found: list[Batch] = []
        rounds: list[Round] = []
        for k in range(cfg.explore_rounds):
            temperature = cfg.explore_temperatures[min(k, len(cfg.explore_temperatures) - 1)]
            if not idx:
                break
            s = self.rounds.sample(
                idx, temperature, None if U == G else [G // U] * len(idx)
            )  # G samples a prompt
            rounds.append(s)
            # Within the round (its groups are this process's own), so scale_rewards "batch" falls back to "group".
            s.advantages, s.zero_std = self.rounds.estimate(s.shaped_rewards, s, self.scale, sizes=s.sizes)
            hit = torch.nonzero(~s.zero_std).flatten()
            if hit.numel():
                b = replace(s.batch, temperature=torch.full((len(idx) * G,), temperature))
                found.append(b.groups(hit if s.sizes is None else rows_of(hit, s.sizes, 1)))
            hits = set(hit.tolist())
            idx = [i for j, i in enumerate(idx) if j not in hits]
        return found, rounds


def signal_rows(r: Round, room: int) -> torch.Tensor:
    """This process's prompt rows of `r` whose group has signal, whole groups in order, until `room` rows are
    filled (the last group may go past it: a group is never cut, and a round that has a group with signal always
    adds one)."""
    if r.sizes is None:
        return torch.nonzero(r.has_signal).flatten()[:room]
    with_signal = torch.nonzero(r.has_signal[group_starts(r.sizes, 1)]).flatten()  # (groups)
    size = torch.tensor(r.sizes)[with_signal]
    before = torch.cumsum(size, 0) - size  # rows taken before each group
    return rows_of(with_signal[before < room], r.sizes, 1)
