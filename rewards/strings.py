"""Verifiers for string tasks (reverse, sort): the completion must be the gold string exactly, then <eos>."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._constants import EOS
from .registry import register_reward


@register_reward("exact_match")
def exact_match(
    completions: Sequence[str], answer: Sequence[Any], eos: str = EOS, **kwargs: Any
) -> list[float | None]:
    """1.0 iff the completion is exactly the gold string followed by <eos>, else 0.0 (None for a None gold).

    No trimming: a space, a changed case, a missing <eos> or anything after it is wrong.
    """
    scores: list[float | None] = []
    for completion, gold in zip(completions, answer, strict=True):
        if gold is None:
            scores.append(None)
            continue
        if not isinstance(completion, str):
            raise TypeError(f"expected a plain-text completion (str), got {type(completion).__name__}")
        if not isinstance(gold, str):
            raise TypeError(f"exact_match needs a string gold answer, got {type(gold).__name__} {gold!r}")
        scores.append(1.0 if completion == gold + eos else 0.0)
    return scores
