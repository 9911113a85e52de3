"""One generation round on one process, and how rounds of one step combine into groups.

A rule that samples a prompt in several passes (sample_allocation screen: a few samples first, more where they
differ; until_signal: more until they differ) gets each pass as a Round of its own; `merged` puts a prompt's rows from every pass together, so that the
round reads as if each group had been sampled at once (its rows consecutive, tinygrpo/algorithm/group_sizes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class Round:
    """One generation round on this process: U completions of each of its P prompt rows; then (scored) their texts
    and rewards; then their advantages (over the global batch for a round at the run's temperature, within the round
    for an explore round). U is G, or allocation_unit when a prompt gets several rows (`sizes`,
    tinygrpo/algorithm/group_sizes.py)."""

    idx: list[int]  # (P,) training-prompt index of each prompt row
    prompt_ids: torch.Tensor  # (P, Tp) left-padded
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # (n, Tc), n = P * U
    completion_mask: torch.Tensor  # (n, Tc) float; 0 after EOS (and on truncated rows if they are masked)
    is_eos: torch.Tensor  # (n,) bool: ended with EOS (not truncated)
    lengths: torch.Tensor  # (n,) tokens per completion, EOS included
    seconds_generate: float
    sizes: list[int] | None = None  # prompt rows of each group, consecutive (None: one each, a group of U)
    # With an environment (tinygrpo/rollout/tool_calls.py): the tokens it fed, which completion_mask leaves out
    # (n, Tc), and each completion's calls and failed calls (n,)
    tool_mask: torch.Tensor | None = None
    tool_calls: torch.Tensor | None = None
    tool_failures: torch.Tensor | None = None
    environments: list | None = None  # (n,) an episode's environment: each completion's instance at its end
    # Set when the round is scored (BatchGenerator.score):
    prompts: list[str] = field(default_factory=list)  # (n,) the prompt of each completion
    completions: list[str] = field(default_factory=list)  # (n,) decoded, <eos> kept
    rewards_per_func: torch.Tensor | None = None  # (n, F) float32, NaN = the function returned None
    rewards: torch.Tensor | None = None  # (n,) combined; None: not scored yet
    seconds_reward: float = 0.0
    greedy_rewards: torch.Tensor | None = None  # (P,) the greedy answer's reward (an estimator that needs it)
    kl: torch.Tensor | None = None  # (n,) summed k1 to the reference over each completion (use_kl_in_reward)
    penalty: torch.Tensor | None = None  # (n,) beta x kl: what the reward pays for it (use_kl_in_reward)
    all_idx: list[int] | None = None  # every process's prompts of the round, in rank order (sample_round)
    # Set once the advantages are known (BatchGenerator.advantages):
    advantages: torch.Tensor | None = None  # (n,) this process's rows
    all_rewards: torch.Tensor | None = None  # (N,) combined rewards of every process's completions
    zero_std: torch.Tensor | None = None  # every process's groups: all valid rewards equal (no signal)
    all_sizes: list[int] | None = None  # every process's groups' sizes (None: one prompt row each)
    has_signal: torch.Tensor | None = None  # (P,) this process's prompt rows whose group is not zero_std
    row_counts: list[int] | None = None  # every process's completions, where they may differ (sizes set)

    def gather(self, procs, t: torch.Tensor) -> torch.Tensor:
        """Every process's rows of a per-completion tensor of this round, in rank order."""
        return procs.gather(t) if self.row_counts is None else procs.gather_rows(t, self.row_counts)

    @property
    def shaped_rewards(self) -> torch.Tensor:
        """The rewards the advantages see: less beta x the summed KL with use_kl_in_reward."""
        return self.rewards if self.penalty is None else self.rewards - self.penalty

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


def merged(first: Round, more: list[Round], owners: list[list[int]], pad_id: int) -> Round:
    """`first` (one prompt row per prompt, sizes None) and later passes `more` over some of its prompts (pass k's
    prompt rows belong to first's prompts owners[k]) as one round whose group j is first's row j, then its rows of
    each pass in order. Prompts are re-padded on the left and completions on the right to common widths. Before any
    advantages."""
    rounds = [first, *more]
    U = first.completion_ids.size(0) // len(first.idx)
    P = len(first.idx)
    owner = torch.tensor(
        [*range(P), *(j for o in owners for j in o)]
    )  # the prompt of each prompt row, in order
    units = torch.sort(owner, stable=True).indices  # first's row j, then its rows of each pass
    rows = (units[:, None] * U + torch.arange(U)).reshape(-1)
    Tp = max(r.prompt_ids.size(1) for r in rounds)
    Tc = max(r.completion_ids.size(1) for r in rounds)

    def cat(field: str, sel: torch.Tensor, pad=None) -> torch.Tensor | None:
        parts = [getattr(r, field) for r in rounds]
        if parts[0] is None:
            return None
        if pad is not None:
            side, width, value = pad
            parts = [
                F.pad(t, (width - t.size(1), 0) if side == "left" else (0, width - t.size(1)), value=value)
                for t in parts
            ]
        return torch.cat(parts)[sel]

    def lst(field: str, sel: torch.Tensor) -> list:
        every = [x for r in rounds for x in getattr(r, field)]
        return [every[i] for i in sel.tolist()]

    return Round(
        idx=lst("idx", units),
        prompt_ids=cat("prompt_ids", units, ("left", Tp, pad_id)),
        prompt_mask=cat("prompt_mask", units, ("left", Tp, 0)),
        completion_ids=cat("completion_ids", rows, ("right", Tc, pad_id)),
        completion_mask=cat("completion_mask", rows, ("right", Tc, 0.0)),
        is_eos=cat("is_eos", rows),
        lengths=cat("lengths", rows),
        seconds_generate=sum(r.seconds_generate for r in rounds),
        sizes=torch.bincount(owner, minlength=P).tolist(),
        tool_mask=cat("tool_mask", rows, ("right", Tc, False)),
        tool_calls=cat("tool_calls", rows),
        tool_failures=cat("tool_failures", rows),
        environments=None if first.environments is None else lst("environments", rows),
        prompts=lst("prompts", rows),
        completions=lst("completions", rows),
        rewards_per_func=cat("rewards_per_func", rows),
        rewards=cat("rewards", rows),
        seconds_reward=sum(r.seconds_reward for r in rounds),
        greedy_rewards=cat("greedy_rewards", units),
        kl=cat("kl", rows),
        penalty=cat("penalty", rows),
    )


@dataclass
class ScoredBatch:
    """What one step trains on, and what it sampled to get there."""

    batch: Batch  # the groups the update trains on (after dynamic sampling's refills)
    first: Round  # the first round: the step's sample statistics
    num_sampled: int  # completions sampled in every round, over all processes
    refill_rounds: int | None  # dynamic sampling's extra rounds (None when it is off)
    seconds_generate: float  # over all rounds
    seconds_reward: float
