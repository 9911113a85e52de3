"""Per-prompt statistics: how often each training prompt's samples were right, and what that makes of it.

GRPO learns only from groups whose rewards differ. A prompt the policy always solves (or always fails) gives a
zero-variance group and no gradient, so what a sample is worth depends on the prompt's pass rate p: a group of G
has signal with probability 1 - p^G - (1 - p)^G. `PromptStats` keeps, for every training prompt, the number of
samples drawn, their summed reward, and an exponential moving average of its groups' mean rewards (the pass-rate
estimate, for 0/1 rewards), updated with the GLOBAL rewards of every base-temperature round, so that every process
holds the same numbers. It is checkpointed with the run.

`selection_weights` turns the estimates into prompt-selection weights (pure, on tensors); the prompt source draws
from them (tinygrpo/rollout/prompts.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

PROMPT_SAMPLERS = ("uniform", "unsolved", "informative")


class PromptStats:
    """Pass-rate estimates of the training prompts (NaN = never sampled)."""

    def __init__(self, num_prompts: int, ema: float) -> None:
        self.ema = ema  # weight of the newest group in the estimate
        self.pass_rate = torch.full((num_prompts,), float("nan"), dtype=torch.float64)
        self.samples = torch.zeros(num_prompts, dtype=torch.long)
        self.reward_sum = torch.zeros(num_prompts, dtype=torch.float64)
        self.last = torch.full((num_prompts,), float("nan"), dtype=torch.float64)  # the latest group's mean

    def update(
        self, idx: list[int], rewards: Tensor, num_generations: int, sizes: list[int] | None = None
    ) -> None:
        """Fold in one round's groups: `idx` (P,) global prompt indices, `rewards` (P*G,) global rewards (NaN =
        no applicable reward, left out). With `sizes`, group j is sizes[j] units of `num_generations` rewards
        (tinygrpo/algorithm/group_sizes.py). A prompt drawn twice in a round is folded in twice, in order."""
        r = rewards.double().view(-1, num_generations)
        counts = (~r.isnan()).sum(1)
        sums = r.nan_to_num(0).sum(1)
        if sizes is not None:  # (per unit, then per group)
            groups = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
            counts = torch.zeros(len(sizes), dtype=counts.dtype).index_add_(0, groups, counts)
            sums = torch.zeros(len(sizes), dtype=sums.dtype).index_add_(0, groups, sums)
        rows = torch.tensor(idx, dtype=torch.long)
        if len(set(idx)) == len(idx):
            self._fold(rows, counts, sums)
        else:  # (a round across the end of a pass): one group at a time, so the EMA sees them in order
            for j in range(len(idx)):
                self._fold(rows[j : j + 1], counts[j : j + 1], sums[j : j + 1])

    def _fold(self, rows: Tensor, counts: Tensor, sums: Tensor) -> None:
        """Fold in groups of distinct prompts `rows`; a group with no valid reward changes nothing."""
        keep = counts > 0
        rows, counts, sums = rows[keep], counts[keep], sums[keep]
        means = sums / counts
        self.samples.index_add_(0, rows, counts)
        self.reward_sum.index_add_(0, rows, sums)
        self.last[rows] = means
        old = self.pass_rate[rows]
        self.pass_rate[rows] = torch.where(old.isnan(), means, old * (1 - self.ema) + means * self.ema)

    def counts(self) -> dict[str, int]:
        """How many training prompts are unseen, and, by their latest group (0/1 rewards), unsolved (no sample
        right), partly solved, solved (every sample right)."""
        p = self.last
        seen = ~p.isnan()
        return {
            "prompts/unseen": int((~seen).sum()),
            "prompts/unsolved": int((seen & (p <= 0)).sum()),
            "prompts/partly_solved": int((seen & (p > 0) & (p < 1)).sum()),
            "prompts/solved": int((seen & (p >= 1)).sum()),
        }

    def state_dict(self) -> dict[str, Tensor]:
        return {
            "pass_rate": self.pass_rate,
            "samples": self.samples,
            "reward_sum": self.reward_sum,
            "last": self.last,
        }

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        n = self.pass_rate.numel()
        for t in state.values():
            if t.numel() != n:
                raise ValueError(f"prompt statistics for {t.numel()} prompts, but the training set has {n}")
        self.pass_rate = state["pass_rate"].double().clone()
        self.samples = state["samples"].long().clone()
        self.reward_sum = state["reward_sum"].double().clone()
        self.last = state["last"].double().clone()


def selection_weights(pass_rate: Tensor, sampler: str, floor: float) -> Tensor:
    """(N,) pass-rate estimates (NaN = unseen) -> (N,) prompt-selection weights, all > 0.

    "uniform"     1 for every prompt.
    "unsolved"    1 - p: a curriculum that revisits what the policy fails (unsolved prompts weigh the most).
    "informative" p (1 - p): the expected squared advantage of a sample (Bernoulli variance), the value of a prompt in
                  Knapsack-RL (Li et al. 2025) and the band of online difficulty filtering (Bae et al. 2025).
    Unseen prompts take the largest weight any prompt can have (1, resp. 1/4): every prompt is tried once early.
    `floor` is added to every weight, so that no prompt is left out for good (a solved one can be forgotten).
    """
    if sampler == "uniform":
        return torch.ones_like(pass_rate)
    p = pass_rate.clamp(0, 1)
    if sampler == "unsolved":
        w = 1 - p
        top = 1.0
    elif sampler == "informative":
        w = p * (1 - p)
        top = 0.25
    else:
        raise ValueError(f"prompt sampler must be one of {PROMPT_SAMPLERS}, got {sampler!r}")
    return torch.where(pass_rate.isnan(), torch.full_like(w, top), w) + floor
