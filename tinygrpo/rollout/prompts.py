"""The training prompts and the order in which GRPO visits them.

The order is a function of the seed and a global cursor only: pass e over the prompts is a fresh permutation seeded
with seed + e, and the cursor counts the prompts handed out so far over all processes. So a resumed run continues
exactly (the cursor is checkpointed), and two processes see the same prompts per step as one process with the same
global batch. Prompts are tokenized and left-padded once, so that a batch is a row selection.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinygrpo.base.progress import chunks, progress

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


class PromptSource:
    """Train prompts (text, token ids, other columns) and their visiting order."""

    def __init__(
        self,
        dataset,
        tokenizer,
        seed: int,
        sampler: str = "uniform",
        floor: float = 0.05,
        stats: PromptStats | None = None,
        shuffle: bool = True,
    ) -> None:
        table = dataset.to_dict()  # plain lists: a `datasets` column indexed row by row is slow
        self.texts: list[str] = table["prompt"]
        self.columns = {c: v for c, v in table.items() if c != "prompt"}
        self.token_ids: list[list[int]] = [
            ids
            for lo, hi in progress(
                chunks(len(self.texts)), len(chunks(len(self.texts))), "tokenizing", "blocks"
            )
            for ids in tokenizer(self.texts[lo:hi])["input_ids"]
        ]
        self.pad_id = tokenizer.pad_token_id
        self.seed = seed
        self.cursor = 0  # global prompts handed out so far
        self.sampler, self.floor = sampler, floor
        self.shuffle = shuffle  # (uniform: a seeded random order each pass; False: the dataset's order)
        self.stats = stats  # pass-rate estimates: the weights of a sampler other than "uniform"
        self._perm: tuple[int, list[int]] | None = None  # (epoch, order): only the current pass is kept
        # Every prompt left-padded once (when that table is small), so that a batch is a row selection.
        self._padded: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        if len(self.token_ids) * max(map(len, self.token_ids)) <= 1 << 24:
            ids, mask = left_pad(self.token_ids, self.pad_id)
            self._padded = (ids, mask, mask.sum(1))

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, count: int) -> list[int]:
        """The next `count` prompt indices of the global order."""
        if self.sampler != "uniform":
            return self._take_weighted(count)
        n = len(self.texts)
        out = []
        for k in range(self.cursor, self.cursor + count):
            epoch = k // n
            if self._perm is None or self._perm[0] != epoch:
                gen = torch.Generator().manual_seed(self.seed + epoch)
                order = torch.randperm(n, generator=gen).tolist() if self.shuffle else list(range(n))
                self._perm = (epoch, order)
            out.append(self._perm[1][k % n])
        self.cursor += count
        return out

    def _take_weighted(self, count: int) -> list[int]:
        """`count` distinct prompts drawn with probability proportional to their weights, one after another without
        replacement (Gumbel top-k: the `count` largest log w + Gumbel noise); seeded by the cursor, so resume is
        exact given the statistics."""
        w = selection_weights(self.stats.pass_rate, self.sampler, self.floor)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.cursor)
        u = torch.rand(w.numel(), generator=gen, dtype=torch.float64).clamp(min=1e-300)
        keys = w.log() - (-u.log()).log()
        out = torch.topk(keys, min(count, w.numel())).indices.tolist()
        while len(out) < count:  # a batch larger than the training set: the rest drawn again (rare)
            out += out[: count - len(out)]
        self.cursor += count
        return out

    def batch(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts `idx`, left-padded to the longest of them: (P, T) ids and mask."""
        if self._padded is None:
            return left_pad([self.token_ids[i] for i in idx], self.pad_id)
        ids, mask, lengths = self._padded
        rows = torch.tensor(idx)
        T = int(lengths[rows].max())
        return ids[rows, -T:], mask[rows, -T:]

    def state_dict(self) -> dict:
        return {"prompt_cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.cursor = state["prompt_cursor"]


def left_pad(ids: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id lists -> (P, T) ids and 0/1 mask, left-padded to the longest."""
    T = max(len(x) for x in ids)
    prompt_ids = torch.tensor([[pad_id] * (T - len(x)) + x for x in ids])
    prompt_mask = torch.tensor([[0] * (T - len(x)) + [1] * len(x) for x in ids])
    return prompt_ids, prompt_mask  # (P, T) each
