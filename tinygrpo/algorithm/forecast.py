"""A forecast of the signal, before the first step: will GRPO find anything to learn from?

A group of G completions teaches GRPO something only when its rewards differ: with 0/1 rewards and a pass rate p, that
happens with probability 1 - p^G - (1 - p)^G, which is small both for prompts the policy always solves and for
prompts it never does (DAPO, Yu et al. 2025, drops such groups; TRL logs their share as `frac_reward_zero_std`). So
the share of groups with signal, not the reference's accuracy, decides whether a run can learn. It is cheap to
measure before training: sample G completions of a few hundred training prompts from the initial policy, at the run's
temperature, and count the groups whose rewards differ. That count, over the prompts, is an unbiased estimate of
the share of the first step's groups with signal when prompts are drawn uniformly.

`forecast_signal` is the pure arithmetic (rewards and verdicts in, the forecast out); the trainer samples
(`BatchGenerator.forecast`), prints the forecast's line, logs its metrics with the first evaluation and, below
`signal_forecast_min`, says what usually helps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tinygrpo.algorithm.core import group_advantages

# What usually helps when few groups carry signal, most direct first.
ADVICE = (
    "a larger num_generations (G), explore_rounds (sample the failed prompts again, hotter), a partial-credit reward "
    "(e.g. digit_match, countdown_partial), or a better reference or answer format (docs/tasks.md)"
)


def signal_probability(p: torch.Tensor, num_generations: int) -> torch.Tensor:
    """The probability that G samples of a prompt with pass rate p hold both a right and a wrong one (0/1 rewards)."""
    return 1 - p.pow(num_generations) - (1 - p).pow(num_generations)


@dataclass(frozen=True)
class SignalForecast:
    prompts: int  # training prompts sampled
    num_generations: int  # G completions of each
    signal: float  # share of the groups whose rewards differ: the groups GRPO learns from
    pass_at_g: float  # share of the prompts with at least one right completion (the verifier's) among G
    pass_rate: float  # share of all completions that are right
    seconds: float = 0.0  # sampling and scoring

    @property
    def metrics(self) -> dict[str, float]:
        """Its row in metrics.jsonl (with the first evaluation's)."""
        return {
            "forecast/frac_groups_with_signal": self.signal,
            f"forecast/pass@{self.num_generations}": self.pass_at_g,
            "forecast/pass_rate": self.pass_rate,
            "forecast/prompts": float(self.prompts),
            "time/forecast": self.seconds,  # (a time: runs that are the same otherwise differ in it)
        }

    def line(self) -> str:
        """The start-up line."""
        return (
            f"signal forecast: {self.signal:.1%} of groups of G={self.num_generations} will carry signal (rewards "
            f"that differ), pass@{self.num_generations} {self.pass_at_g:.1%}, {self.pass_rate:.1%} of samples right "
            f"(the initial policy on {self.prompts} training prompts, {self.seconds:.1f} s)"
        )

    def warning(self, minimum: float) -> str | None:
        """One line when the forecast is below `minimum`: why it matters and what usually helps."""
        if self.signal >= minimum:
            return None
        why = "almost every group is all right" if self.pass_rate > 0.5 else "almost every group is all wrong"
        return (
            f"warning: only {self.signal:.1%} of groups are forecast to carry signal (below signal_forecast_min="
            f"{minimum:g}; {why}): most samples will teach nothing. What usually helps: {ADVICE}"
        )


def forecast_signal(
    rewards: torch.Tensor, right: torch.Tensor, num_generations: int, seconds: float = 0.0
) -> SignalForecast:
    """(P * G,) combined rewards (NaN: no reward applied) and (P * G,) verdicts, grouped by prompt -> the forecast.
    A group carries signal as the trainer decides it (core.group_advantages' zero_std: its valid rewards not all
    equal), so the forecast and the run's 1 - frac_reward_zero_std measure the same thing."""
    G = num_generations
    _, zero_std = group_advantages(rewards, G, mode="reinforce")
    hits = right.view(-1, G).bool()
    P = hits.size(0)
    return SignalForecast(
        prompts=P,
        num_generations=G,
        signal=float((~zero_std).float().mean()) if P else 0.0,
        pass_at_g=float(hits.any(1).float().mean()) if P else 0.0,
        pass_rate=float(hits.float().mean()) if P else 0.0,
        seconds=seconds,
    )
