"""The training prompts and the order in which GRPO visits them.

The order is a function of the seed and a global cursor only: pass e over the prompts is a fresh permutation seeded
with seed + e, and the cursor counts the prompts handed out so far over all processes. So a resumed run continues
exactly (the cursor is checkpointed), and two processes see the same prompts per step as one process with the same
global batch. Prompts are tokenized and left-padded once, so that a batch is a row selection.
"""

from __future__ import annotations

import torch

from tinygrpo.data.progress import chunks, progress
from tinygrpo.rollout.prompt_stats import PromptStats, selection_weights


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
