"""GRPOConfig's options for the run as a whole: its batches and length in steps (TRL's meanings: a step is an
optimizer step), its seed and threads, and the checks that stop or warn. One dataclass per argument group of
`--help`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from tinygrpo.run.checks import ConfigError

# The run's length when no option gives it: optimizer steps (rounded up to whole generations).
DEFAULT_MAX_STEPS = 1000


@dataclass
class BatchesAndSteps:
    """GRPOConfig's options: batches and steps."""

    _argument_group_name: ClassVar[str] = "batches and steps"

    per_device_train_batch_size: int = field(
        default=512,
        metadata={
            "help": "Completions per process in each micro-batch (as in TRL): with gradient_accumulation_steps 1, "
            "an optimizer step's. An optimizer step holds whole groups: this x gradient_accumulation_steps is a "
            "multiple of num_generations. Prompts per optimizer step = that / G x num_processes."
        },
    )
    gradient_accumulation_steps: int = field(
        default=1,
        metadata={
            "help": "Micro-batches per optimizer step (TRL's): the step's gradient is that of all of them. Here "
            "they run as one forward (a tiny model has no memory to save), which gives the gradient accumulation "
            "gives: the loss is normalised over the whole step, as TRL's num_items_in_batch does."
        },
    )
    steps_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "Micro-batches per generation (TRL's): a generation samples per_device_train_batch_size x "
            "steps_per_generation completions per process, which feed steps_per_generation / "
            "gradient_accumulation_steps optimizer steps, so that the policy moves within a generated batch "
            "(off-policy reuse: the ratio and the clip act). None: gradient_accumulation_steps (one optimizer step "
            "per generation, as in TRL)."
        },
    )
    num_mini_batches: int = field(
        default=1,
        metadata={
            "help": "This repository's older spelling of steps_per_generation: m splits per_device_train_batch_size "
            "into m optimizer steps (read as per_device_train_batch_size / m and steps_per_generation m)."
        },
    )
    num_iterations: int = field(
        default=1,
        metadata={
            "help": "mu: optimisation passes per generated batch (GRPO, Shao et al. 2024). With 1 (and one "
            "optimizer step per generation) the ratio is exactly 1 and the gradient is the plain policy gradient; "
            "the clip never acts."
        },
    )
    max_steps: int | None = field(
        default=None,
        metadata={
            "help": "Optimizer steps of the run, as TRL counts them (each generation makes num_iterations x "
            "steps_per_generation / gradient_accumulation_steps; a multiple of that). None (or -1, TRL's): 1000, "
            "or what num_train_epochs or max_generations gives. logging_steps, eval_steps and save_steps count "
            "optimizer steps too."
        },
    )
    max_generations: int | None = field(
        default=None,
        metadata={
            "help": "The run's length in generations (sample, score, update: what max_steps counted here before it "
            "took TRL's meaning): sets max_steps = this x the optimizer steps each generation makes, over any max_steps "
            "given."
        },
    )
    num_train_epochs: float | None = field(
        default=None,
        metadata={
            "help": "Passes over the training prompts (TRL's): the run is ceil(epochs x prompts / prompts per "
            "generation) generations. max_steps, when given, wins (as in TRL)."
        },
    )

    @property
    def generation_size(self) -> int:
        """Completions each process samples per generation (before dynamic sampling's refills)."""
        return self.per_device_train_batch_size * (
            self.steps_per_generation or self.gradient_accumulation_steps
        )

    @property
    def mini_batches(self) -> int:
        """Optimizer steps per pass over a generated batch: steps_per_generation / gradient_accumulation_steps."""
        return (
            self.steps_per_generation or self.gradient_accumulation_steps
        ) // self.gradient_accumulation_steps

    @property
    def updates_per_generation(self) -> int:
        """Optimizer steps each generation makes (num_iterations passes x mini_batches): what max_steps counts."""
        return self.num_iterations * self.mini_batches

    def _check_batches_and_steps(self) -> None:
        """TRL's batch options and step count: num_mini_batches read as steps_per_generation, whole groups in every
        optimizer step, and max_steps (optimizer steps) a whole number of generations, from max_generations or
        1000 when not given (num_train_epochs: resolved once the training split's size is known, resolve_length)."""
        G, B, acc = self.num_generations, self.per_device_train_batch_size, self.gradient_accumulation_steps
        # Advantages are computed within a group and the loss normalises over whole groups: an optimizer step (every
        # process's share of it) holds whole groups.
        if B * acc % G:
            what = f"per_device_train_batch_size={B}" + (
                f" x gradient_accumulation_steps={acc} = {B * acc}" if acc > 1 else ""
            )
            raise ConfigError(
                f"{what} is not a positive multiple of num_generations={G}: each process must hold whole groups"
            )
        if self.num_mini_batches > 1:  # (this repository's older spelling of the same split)
            m = self.num_mini_batches
            if (self.steps_per_generation or 1) > 1 or acc > 1:
                raise ConfigError(
                    f"num_mini_batches={m} is the older spelling of steps_per_generation: set steps_per_generation "
                    "(and gradient_accumulation_steps), not both"
                )
            if (B // G) % m:
                raise ConfigError(f"num_mini_batches={m} must divide the {B // G} groups per process")
            self.per_device_train_batch_size, self.steps_per_generation, self.num_mini_batches = B // m, m, 1
            B = B // m
        if self.warmup_steps >= 1 and self.warmup_steps != int(self.warmup_steps):
            raise ConfigError(
                f"warmup_steps={self.warmup_steps:g} is neither a whole number of steps nor a share in (0, 1)"
            )
        spg = self.steps_per_generation or acc
        if spg % acc:
            raise ConfigError(
                f"steps_per_generation={spg} is not a multiple of gradient_accumulation_steps={acc}: an optimizer "
                "step takes whole micro-batches of one generation"
            )
        k = self.updates_per_generation
        # max_generations wins: a recipe's max_steps was written for a run of another shape
        if self.max_generations is not None:
            self.max_steps = self.max_generations * k
        elif self.max_steps is None and self.num_train_epochs is None:
            self.max_steps = -(-DEFAULT_MAX_STEPS // k) * k
        if self.max_steps is not None and self.max_steps % k:
            raise ConfigError(
                f"max_steps={self.max_steps} counts optimizer steps (as TRL's), and each generation makes {k} "
                f"(num_iterations={self.num_iterations} x {self.mini_batches} per generated batch): give a multiple "
                f"of {k}, or max_generations"
            )

    def resolve_length(self, num_prompts: int, num_processes: int) -> None:
        """num_train_epochs as max_steps, once the training split's size is known (TRL's rule: max_steps, when
        given, wins; a pass is the prompts over the prompts each generation draws, rounded up)."""
        if self.max_steps is not None:
            return
        per_generation = self.generation_size // self.unit * num_processes
        generations = max(1, math.ceil(self.num_train_epochs * num_prompts / per_generation))
        self.max_steps = generations * self.updates_per_generation


@dataclass
class SeedAndThreads:
    """GRPOConfig's options: seed and threads."""

    _argument_group_name: ClassVar[str] = "seed and threads"

    seed: int = field(default=42, metadata={"help": "Seed for data order, sampling and everything else."})
    torch_num_threads: int = field(
        default=0, metadata={"help": "torch threads per process (0 = cores / processes)."}
    )


@dataclass
class Checks:
    """GRPOConfig's options: checks before and during training."""

    _argument_group_name: ClassVar[str] = "checks before and during training"

    signal_forecast_prompts: int = field(
        default=256,
        metadata={
            "help": "Before the first step, sample G completions of this many training prompts from the initial "
            "policy and print the share of groups whose rewards differ (the groups GRPO learns from; a prompt of "
            "pass rate p gives one with probability 1 - p^G - (1-p)^G, which dynamic sampling, DAPO, Yu et al. 2025, "
            "is built around) and pass@G. Its own generator: training samples what it would without it (0 = off)."
        },
    )
    signal_forecast_min: float = field(
        default=0.2,
        metadata={
            "help": "Below this forecast share of groups with signal, one line says so and what usually helps (a "
            "larger G, explore rounds, a partial-credit reward, a better reference or format)."
        },
    )
    on_nonfinite: str = field(
        default="stop",
        metadata={"help": "A NaN/inf loss or gradient: stop (keep the last checkpoint) or skip."},
    )
