"""reasoning-gym's own scorer as a reward (TRL's signature): `score_answer` of the entry's source dataset.

Each row carries its reasoning-gym entry (question, answer, metadata) as a JSON string in the `entry` column, which
is what `score_answer` reads. The completion must end in <eos> (a truncated one scores 0.0); the text before it is
the answer. reasoning-gym is an optional extra: `pip install reasoning-gym` (or `pip install -e ".[reasoning]"`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ._constants import EOS
from .registry import register_reward

INSTALL = 'pip install reasoning-gym (or pip install -e ".[reasoning]")'


@lru_cache(maxsize=64)
def scorer(source_dataset: str) -> Any:
    """reasoning-gym's score_answer for one of its datasets; ImportError saying how to install it."""
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError(f"reasoning-gym is not installed: {INSTALL}") from None
    return reasoning_gym.get_score_answer_fn(source_dataset)


@register_reward("reasoning_gym")
def reasoning_gym_score(
    completions: Sequence[str], entry: Sequence[str], eos: str = EOS, **kwargs: Any
) -> list[float]:
    """reasoning-gym's score_answer on the text before <eos> (0.0 without <eos>); 1.0 is right."""
    scores = []
    for completion, raw in zip(completions, entry, strict=True):
        item = json.loads(raw)
        if not isinstance(completion, str) or not completion.endswith(eos):
            scores.append(0.0)
            continue
        score = scorer(item["metadata"]["source_dataset"])(answer=completion[: -len(eos)], entry=item)
        scores.append(float(score))
    return scores


@register_reward("reasoning_gym_final_answer")
def reasoning_gym_final_answer(
    completions: Sequence[str], entry: Sequence[str], eos: str = EOS, **kwargs: Any
) -> list[float]:
    """Worked or direct: reasoning-gym's score_answer on the text after the completion's last '=' (all of it when
    there is none), before <eos> (0.0 without <eos>); the work before it is not checked, as `final_answer` reads
    the built-in tasks' worked completions."""
    answers = [
        c[: -len(eos)].rpartition("=")[2] + eos if isinstance(c, str) and c.endswith(eos) else c
        for c in completions
    ]
    return reasoning_gym_score(answers, entry, eos)
