"""Swappable verifiable rewards with TRL's ``GRPOTrainer`` calling convention.

``fn(prompts, completions, completion_ids, **columns) -> list[float | None]``; see
``rewards/README.md``. Built-ins: ``accuracy``, ``accuracy_lenient``, ``format``,
``digit_match``, ``length_penalty``, ``final_answer``, ``reversed_answer`` and the tasks' verifiers in ``strings.py``,
``countdown.py``, ``reasoning_gym.py``. ``python -m rewards list`` shows what is registered.
"""

from __future__ import annotations

from ._constants import EOS
from .builtin import (
    LengthPenalty,
    accuracy,
    accuracy_lenient,
    digit_match,
    final_answer,
    format_reward,
    length_penalty,
    make_accuracy,
    make_length_penalty,
    reversed_answer,
    soft_overlong_punishment,
)
from .registry import (
    REWARD_REGISTRY,
    RewardResolutionError,
    discover_rewards,
    list_rewards,
    register_reward,
    resolve_reward,
    resolve_rewards,
)
from .scoring import (
    RewardError,
    check_binary,
    combine_rewards,
    compute_rewards,
    reward_metrics,
    rewards_float32,
)

__all__ = [
    "EOS",
    "REWARD_REGISTRY",
    "LengthPenalty",
    "RewardError",
    "RewardResolutionError",
    "accuracy",
    "accuracy_lenient",
    "check_binary",
    "combine_rewards",
    "compute_rewards",
    "digit_match",
    "discover_rewards",
    "final_answer",
    "format_reward",
    "length_penalty",
    "list_rewards",
    "make_accuracy",
    "make_length_penalty",
    "reversed_answer",
    "register_reward",
    "resolve_reward",
    "resolve_rewards",
    "reward_metrics",
    "rewards_float32",
    "soft_overlong_punishment",
]
