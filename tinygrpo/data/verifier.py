"""The rule that decides whether a completion is right (Verifier: a task's verifier, a reward that scores 1.0 right), and
the shares of a task's answer formats among completions, right or not (format_counts, format_metrics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rewards import EOS, accuracy, compute_rewards, resolve_reward
from tinygrpo.data.task import Formats


@dataclass(frozen=True)
class Verifier:
    """The rule that decides whether a completion is right: a reward with TRL's signature that scores 1.0 right and
    0.0 wrong, called with the split's columns (a None or any other score is wrong); `kinds` breaks accuracy down
    by kind of problem, `formats` by the form of the completion; `eos`: the end-of-sequence text of the tokenizer
    whose completions it reads (passed as the `eos` keyword, as the trainer passes it to every reward).
    `Verifier.of(dataset)` is the dataset's task's verifier (tinygrpo/data/task.py)."""

    name: str = "accuracy"
    fn: Callable[..., Any] = accuracy
    kinds: Callable[[dict[str, list]], dict[str, list[bool]]] | None = field(default=None, compare=False)
    formats: Formats | None = field(default=None, compare=False)
    target: str = "answer"  # the column whose text, then the EOS text, is a right completion (the gold check)
    eos: str = EOS

    @classmethod
    def of(
        cls, dataset: str, eval_reward: str | None = None, task: str | None = None, eos: str = EOS
    ) -> Verifier:
        """The verifier `choose` picks."""
        return cls.choose(dataset, eval_reward, task, eos)[0]

    @classmethod
    def choose(
        cls, dataset: str, eval_reward: str | None = None, task: str | None = None, eos: str = EOS
    ) -> tuple[Verifier, str]:
        """The rule held-out accuracy is decided by, and where the choice came from: `eval_reward` when given, else
        the `correct` reward of the task named (a run's `task`: formats of one problem set may be read by different
        verifiers) or of the dataset's task, else the strict integer rule (`accuracy`) for data no task names.
        Kinds, formats and the target column are the task's either way."""
        from tinygrpo.data.task import get_task, task_of_dataset

        named = get_task(task) if task else task_of_dataset(dataset)
        kinds, formats = (named.kinds, named.formats) if named is not None else (None, None)
        target = named.target if named is not None else "answer"
        if eval_reward:
            return cls(eval_reward, resolve_reward(eval_reward), kinds, formats, target, eos), "--eval_reward"
        if named is None:
            return cls(eos=eos), "the default for data no task names; --eval_reward chooses another"
        return cls(
            named.correct, resolve_reward(named.correct), kinds, formats, target, eos
        ), f"the task {named.name}'s verifier"

    def __call__(self, completions: list[str], rows: dict[str, list], k: int = 1) -> list[bool]:
        """Whether each completion is right; rows[c][i] are the columns of completions[i * k : (i + 1) * k]."""
        n = len(completions)
        cols = {c: [v for v in vals for _ in range(k)] for c, vals in rows.items() if c != "prompt"}
        prompts = [p for p in rows["prompt"] for _ in range(k)] if "prompt" in rows else [""] * n
        ids = [[] for _ in range(n)]  # (correctness is a property of the text; no verifier reads the ids)
        scores = compute_rewards([self.fn], [self.name], prompts, completions, ids, cols, {"eos": self.eos})[
            :, 0
        ]
        return (np.nan_to_num(scores) == 1.0).tolist()


def format_counts(formats: Formats, completions: list[str], right: list[bool]) -> torch.Tensor:
    """(2, F) float: how many completions take each of the F formats (row 0) and how many of those are right (row
    1), in `formats.names` order: counts, so that processes can add theirs before the shares are taken."""
    index = {name: i for i, name in enumerate(formats.names)}
    counts = torch.zeros(2, len(index))
    for c, ok in zip(completions, right, strict=True):
        name = formats.of(c)
        if name not in index:  # (a task's detector and its list of names disagree: a defect of the task file)
            raise ValueError(
                f"the format detector named {name!r} for the completion {c!r}, not one of {', '.join(formats.names)}"
            )
        f = index[name]
        counts[0, f] += 1
        counts[1, f] += ok
    return counts


def format_metrics(prefix: str, formats: Formats, counts: torch.Tensor) -> dict[str, float]:
    """ "<prefix>format/<name>": the share of completions in each format, and "<prefix>format_accuracy/<name>": the
    share of those that are right (for a format some completion took), from format_counts' (2, F) counts."""
    total = float(counts[0].sum())
    m = {f"{prefix}format/{n}": float(counts[0, i]) / max(total, 1) for i, n in enumerate(formats.names)}
    for i, name in enumerate(formats.names):
        if counts[0, i] > 0:
            m[f"{prefix}format_accuracy/{name}"] = float(counts[1, i] / counts[0, i])
    return m
