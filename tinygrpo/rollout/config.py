"""The rollout's options, declared once (GRPOConfig is composed of them, tinygrpo/run/config.py): how a completion is
sampled (SamplingParams, the decoder's settings) and what a step samples (RolloutConfig: G completions of each prompt,
the environment's tools, which prompts, and which it samples again)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from tinygrpo.algorithm.allocation import SAMPLE_ALLOCATIONS
from tinygrpo.base.options import (
    AT_LEAST_1,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    Bound,
    ConfigError,
    Options,
    option,
)
from tinygrpo.rollout.environment import get_environment
from tinygrpo.rollout.prompts import PROMPT_SAMPLERS

DEFAULT_EXPLORE_TEMPERATURES = [2.0, 3.0, 4.0]


@dataclass
class SamplingParams(Options):
    """How a completion is sampled, token by token: the decoder's settings (sample_completions). Filters and the
    penalty change what is sampled; the log-probs a loss reads are the model's at the temperature. A decode draws its
    uniforms from a generator of its own (sample_completions' `generator`): the same generator, drawn in the same
    order, gives the same completions."""

    _argument_group_name: ClassVar[str] = "sampling"

    max_completion_length: int = option(
        4,
        "Most tokens sampled per completion (<eos> included); decoding stops earlier once every row has emitted <eos>.",
        bound=AT_LEAST_1,
    )
    temperature: float = option(
        1.0,
        "Sampling temperature: the logits are divided by it before the softmax (< 1 sharpens, > 1 flattens); the loss's log-probs are taken at it too. 0 is greedy (argmax), for evaluation only.",
        bound=Bound(0, words=">= 0 (0: greedy)"),
    )
    top_k: int = option(
        0,
        "Sample from the k most likely tokens only (Fan et al. 2018, Hierarchical Neural Story Generation); 0 = all.",
        bound=NON_NEGATIVE,
    )
    top_p: float = option(
        1.0,
        "Nucleus sampling: among the smallest set of most likely tokens whose probability reaches top_p (Holtzman et al. 2020, The Curious Case of Neural Text Degeneration); 1 = all.",
        bound=Bound(0, 1, lo_open=True),
    )
    min_p: float = option(
        0.0,
        "Sample only tokens whose probability is at least min_p x the most likely one's (TRL's; "
        "Nguyen et al. 2024, min-p sampling); 0 = all. As top_k and top_p, it changes what is sampled, not the "
        "log-probs the loss reads.",
        bound=Bound(0, 1, hi_open=True),
    )
    repetition_penalty: float = option(
        1.0,
        "Divide a positive logit (multiply a negative one) of every token already in the prompt or the "
        "completion by this before sampling (TRL's; Keskar et al. 2019, CTRL); 1 = off. Samples drawn with it "
        "are off the policy the loss reads, as in TRL.",
        bound=POSITIVE,
    )

    @classmethod
    def greedy(cls, max_completion_length: int) -> SamplingParams:
        """Argmax decoding: draws nothing from any generator."""
        return cls(max_completion_length, temperature=0.0)


@dataclass
class RolloutConfig(Options):
    """What a step samples: G completions of each prompt (with an environment's tools), which prompts, and which it samples again."""

    _argument_group_name: ClassVar[str] = "generation and exploration"

    num_generations: int = option(
        8,
        "G: completions sampled per prompt (>= 2).",
        bound=Bound(2, words=">= 2 (a group needs a baseline)"),
    )
    mask_truncated_completions: bool = option(
        False, "Leave completions that hit max_completion_length out of the loss (DAPO)."
    )
    environment: str | None = option(
        None,
        "Tools the policy calls inside its completions: an environment of tinygrpo/rollout/environments/ "
        "(calculator, calculator_one_digit) or module:NAME. A call written as the environment's syntax "
        "(the calculator's <12*7=) is answered by feeding the row the tool's reply (84>) before it samples "
        "again; those tokens are read by the model but left out of the loss, the KL and the entropy "
        "(TRL's tools and tool_mask; the masking of environment tokens in agent RL, e.g. Search-R1, Jin et "
        "al. 2025, arXiv 2503.09516). None: no tools.",
    )
    max_tool_calling_iterations: int | None = option(
        None,
        "Most tool calls answered per completion (TRL's name); later calls are not answered. None: "
        "the environment's own cap.",
        bound=NON_NEGATIVE,
    )
    dynamic_sampling: bool = option(
        True,
        "DAPO (Yu et al. 2025): drop zero-variance groups and refill the batch with fresh prompts, "
        "at most max_dynamic_sampling_rounds extra rounds per step.",
    )
    max_dynamic_sampling_rounds: int = option(
        3, "Bound on dynamic sampling refills (extra generation rounds per step).", bound=NON_NEGATIVE
    )
    sample_allocation: str = option(
        "fixed",
        f"How many samples each prompt of a round gets: {', '.join(SAMPLE_ALLOCATIONS)}. fixed: G each "
        "(GRPO); knapsack: the round's P x G samples split prompt by prompt, in units of allocation_unit, to "
        "maximise the summed (1 - p^n - (1-p)^n) p (1-p)^2 of n samples at each prompt's pass-rate estimate p "
        "(Knapsack RL, Li et al. 2025, arXiv 2509.25849), at least one unit and at most max_num_generations each; "
        "screen: allocation_unit samples of every prompt first, the rest of a group of G only where they differ or "
        "the prompt is known to be hard (SPEED, Zhang et al. 2025, arXiv 2506.09016); until_signal: "
        "allocation_unit samples of every prompt, then one more unit at a time of each prompt whose rewards are "
        "all alike, until they differ, it has max_num_generations or the round has spent P x G samples "
        "(Reinforce-Ada, Xiong et al. 2025, arXiv 2510.04996).",
        choices=SAMPLE_ALLOCATIONS,
    )
    allocation_unit: int = option(
        4,
        "Samples per unit of sample_allocation (not fixed): a prompt gets whole units; the grouped fast "
        "path encodes a prompt once per unit. Divides num_generations.",
        bound=AT_LEAST_1,
    )
    screen_hard_below: float = option(
        0.5,
        "sample_allocation screen: a prompt whose screen unit is all alike still gets a whole group "
        "when its pass-rate estimate is in (0, this): solved before, but rarely (SPEED, Zhang et al. 2025, "
        "arXiv 2506.09016, continues only mixed screens; 0 = the same).",
        bound=PROBABILITY,
    )
    max_num_generations: int = option(
        32,
        "Most samples one prompt gets in a round under sample_allocation knapsack or until_signal.",
        bound=Bound(2, words=">= 2 (a group needs a baseline)"),
    )
    prompt_sampler: str = option(
        "unsolved",
        f"How each step's prompts are drawn: {', '.join(PROMPT_SAMPLERS)}. uniform: a fresh permutation "
        "per pass; unsolved: weight 1 - p (a curriculum that revisits failed prompts); informative: weight "
        "p (1 - p), the variance of a 0/1 reward (Knapsack-RL, Li et al. 2025; online difficulty filtering, "
        "Bae et al. 2025). p: the prompt's pass-rate estimate (pass_rate_ema).",
        choices=PROMPT_SAMPLERS,
    )
    shuffle_dataset: bool = option(
        True,
        "Draw the training prompts in a seeded random order (TRL's); false: in the dataset's order, "
        "each pass alike (prompt_sampler uniform only: the other samplers choose by pass rate).",
    )
    prompt_sampler_floor: float = option(
        0.05, "Added to every prompt's selection weight, so that none is left out.", bound=POSITIVE
    )
    pass_rate_ema: float = option(
        0.5,
        "Weight of a prompt's newest group in its pass-rate estimate (an EMA of group means).",
        bound=Bound(0, 1, lo_open=True),
    )
    explore_rounds: int = option(
        3,
        "Adaptive resampling of failed prompts (Reinforce-Ada, Xiong et al. 2025): a prompt whose G "
        "samples all scored below the batch's best is sampled again, G at a time, at the next of "
        "explore_temperatures, for at most this many rounds, until its group has signal (0 = off).",
        bound=NON_NEGATIVE,
    )
    explore_temperatures: list[float] = option(
        factory=lambda: list(DEFAULT_EXPLORE_TEMPERATURES),
        help="Sampling temperature of each explore round (the last repeats). Higher temperatures find the "
        "answers a confident policy misses; the loss reweights those samples to the policy's temperature "
        "with truncated importance weights (explore_importance_sampling_clip_max).",
        bound=Bound(0, lo_open=True, words="positive numbers"),
    )

    @property
    def unit(self) -> int:
        """Completions sampled per prompt row: G, or allocation_unit when prompts get whole units of it."""
        return self.num_generations if self.sample_allocation == "fixed" else self.allocation_unit

    def rules(self) -> None:
        # Each explore round's rows carry their temperature as a float32 tensor (Batch.temperature).
        too_hot = [t for t in self.explore_temperatures if t > torch.finfo(torch.float32).max]
        if too_hot:
            raise ConfigError(
                f"explore_temperatures holds {too_hot[0]}, beyond float32's range (at most 3.4e+38): give temperatures "
                "a float32 can hold"
            )
        if not self.shuffle_dataset and self.prompt_sampler != "uniform":
            raise ConfigError(
                f"shuffle_dataset false draws the prompts in the dataset's order, which prompt_sampler "
                f"{self.prompt_sampler} does not (it chooses by pass rate): set prompt_sampler uniform"
            )
        # The last explore temperature repeats, so a list shorter than the rounds is fine; values beyond the rounds
        # would never be used. (The default list is a schedule that serves any number of rounds.)
        temps = self.explore_temperatures
        if self.explore_rounds and len(temps) > self.explore_rounds and temps != DEFAULT_EXPLORE_TEMPERATURES:
            raise ConfigError(
                f"explore_temperatures has {len(temps)} values {temps} for explore_rounds={self.explore_rounds}: "
                f"the last {len(temps) - self.explore_rounds} would never be used; give at most {self.explore_rounds} "
                "(the last one repeats)"
            )
        G, U, cap = self.num_generations, self.allocation_unit, self.max_num_generations
        if self.sample_allocation != "fixed" and (G % U or cap % U or cap < G):
            raise ConfigError(
                f"sample_allocation {self.sample_allocation}: allocation_unit={U} must divide num_generations={G} and "
                f"max_num_generations={cap}, and max_num_generations must be at least num_generations"
            )
        if self.environment in ("", "None", "none", "null"):  # (a command line cannot pass None)
            self.environment = None
        if self.environment is not None:
            try:
                get_environment(self.environment)
            except ValueError as e:
                raise ConfigError(f"environment: {e}") from None
