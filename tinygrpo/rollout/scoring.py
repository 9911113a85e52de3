"""Scoring a round's completions: decoded to text (<eos> kept), then every reward function (TRL's calling convention)
and their weighted sum, as float32 tensors. A reward function that raises or returns what a run cannot use is a
RewardFailure: one line naming the function and the sample, never a traceback mid-run."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rewards import RewardError, check_binary, compute_rewards, rewards_float32
from tinygrpo.model.text import decode_rows, eos_text
from tinygrpo.rollout.prompts import PromptSource


class RewardFailure(RewardError):
    """A reward function failed on a round's samples (it raised, or returned a value the run cannot use): the trainer
    adds the step and the checkpoint to resume from."""


@dataclass(frozen=True)
class RewardSpec:
    """Resolved reward functions (TRL's calling convention), their names and weights, and the trainer keywords
    every function may ask for."""

    funcs: list
    names: list[str]
    weights: list[float]
    kwargs: dict


def reward_spec(
    funcs: list, names: list[str], weights: list[float], max_completion_length: int, tokenizer
) -> RewardSpec:
    """The trainer keywords passed to every reward function: max_completion_length and the tokenizer's EOS text (as
    decoded completions end with it: "<eos>" for tiny_lm, "<|endoftext|>" for GPT-2's tokenizer)."""
    kwargs = {"max_completion_length": max_completion_length, "eos": eos_text(tokenizer)}
    return RewardSpec(funcs, names, weights, kwargs)


def no_reward_applies(samples: int, names: list[str], failed: str = "") -> str:
    """The error of a run whose reward functions apply to none of its first samples; its environment's failures
    (`failed`: ToolUse.failures) said first, as they leave its reward nothing to read."""
    return (
        (f"{failed}: " if failed else "")
        + f"no reward function applies to any of the {samples} samples (every reward is None): nothing to learn "
        f"from; check the reward functions ({', '.join(names)}) and the dataset's columns"
        + (", and the environment" if failed else "")
    )


class Scorer:
    """Completions of training prompts -> their texts and rewards. `binary_for`: the estimator that needs 0/1
    rewards, named in the error when a round's are not (None: any reward goes)."""

    def __init__(self, rewards: RewardSpec, tokenizer, binary_for: str | None) -> None:
        self.rewards, self.tokenizer, self.binary_for = rewards, tokenizer, binary_for
        self._decoded: dict[tuple[int, ...], str] = {}  # completion ids -> text, see decode_rows

    def __call__(
        self,
        source: PromptSource,
        idx: list[int],
        completion_ids: torch.Tensor,
        lengths: torch.Tensor,
        reps: int,
        environments: list | None = None,
    ) -> tuple[list[str], list[str], torch.Tensor, torch.Tensor]:
        """Decode and score `reps` completions of each prompt `idx` of `source` (rows grouped by prompt): each row's prompt
        and completion text, the (n, F) float32 rewards of each function (NaN = None) and their (n,) weighted sum.
        `environments`: each completion's environment instance, passed as TRL passes it (an episode's reward reads
        its state)."""
        ids = [row[:n] for row, n in zip(completion_ids.tolist(), lengths.tolist(), strict=True)]
        completions = decode_rows(self.tokenizer, ids, self._decoded)
        prompts = [source.texts[i] for i in idx for _ in range(reps)]
        columns = {c: [v[i] for i in idx for _ in range(reps)] for c, v in source.columns.items()}
        rw = self.rewards
        try:
            kwargs = rw.kwargs if environments is None else {**rw.kwargs, "environments": environments}
            per_func = compute_rewards(rw.funcs, rw.names, prompts, completions, ids, columns, kwargs)
            per32, total = rewards_float32(per_func, rw.weights, rw.names, completions)  # (n, F), (n,)
            if self.binary_for is not None:
                check_binary(total, per_func, rw.weights, rw.names, completions, self.binary_for)
        except RewardError as e:
            raise RewardFailure(str(e)) from e
        return prompts, completions, torch.from_numpy(per32), torch.from_numpy(total)
