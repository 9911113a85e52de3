"""The update's options, declared once (GRPOConfig is composed of them, tinygrpo/run/config.py): how many completions a
step trains on, in how many optimizer steps and passes, and how long the run is (BatchConfig); AdamW, its schedule and
its clip (OptimizerConfig)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

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

# The run's length when no option gives it: optimizer steps (rounded up to whole generations).
DEFAULT_MAX_STEPS = 1000


@dataclass
class BatchConfig(Options):
    """How many completions a step trains on, in how many optimizer steps and passes, and how long the run is (TRL's meanings: a step is an optimizer step)."""

    _argument_group_name: ClassVar[str] = "batches and steps"

    per_device_train_batch_size: int = option(
        512,
        "Completions per process in each micro-batch (as in TRL): with gradient_accumulation_steps 1, "
        "an optimizer step's. An optimizer step holds whole groups: this x gradient_accumulation_steps is a "
        "multiple of num_generations. Prompts per optimizer step = that / G x num_processes.",
        bound=AT_LEAST_1,
    )
    gradient_accumulation_steps: int = option(
        1,
        "Micro-batches per optimizer step (TRL's): the step's gradient is that of all of them. Here "
        "they run as one forward (a tiny model has no memory to save), which gives the gradient accumulation "
        "gives: the loss is normalised over the whole step, as TRL's num_items_in_batch does.",
        bound=AT_LEAST_1,
    )
    steps_per_generation: int | None = option(
        None,
        "Micro-batches per generation (TRL's): a generation samples per_device_train_batch_size x "
        "steps_per_generation completions per process, which feed steps_per_generation / "
        "gradient_accumulation_steps optimizer steps, so that the policy moves within a generated batch "
        "(off-policy reuse: the ratio and the clip act). None: gradient_accumulation_steps (one optimizer step "
        "per generation, as in TRL).",
        bound=AT_LEAST_1,
    )
    num_mini_batches: int = option(
        1,
        "This repository's older spelling of steps_per_generation: m splits per_device_train_batch_size "
        "into m optimizer steps (read as per_device_train_batch_size / m and steps_per_generation m).",
        bound=AT_LEAST_1,
    )
    num_iterations: int = option(
        1,
        "mu: optimisation passes per generated batch (GRPO, Shao et al. 2024). With 1 (and one "
        "optimizer step per generation) the ratio is exactly 1 and the gradient is the plain policy gradient; "
        "the clip never acts.",
        bound=AT_LEAST_1,
    )
    max_steps: int | None = option(
        None,
        "Optimizer steps of the run, as TRL counts them (each generation makes num_iterations x "
        "steps_per_generation / gradient_accumulation_steps; a multiple of that). None (or -1, TRL's): 1000, "
        "or what num_train_epochs or max_generations gives. logging_steps, eval_steps and save_steps count "
        "optimizer steps too.",
        bound=AT_LEAST_1,
    )
    max_generations: int | None = option(
        None,
        "The run's length in generations (sample, score, update: what max_steps counted here before it "
        "took TRL's meaning): sets max_steps = this x the optimizer steps each generation makes, over any max_steps "
        "given.",
        bound=AT_LEAST_1,
    )
    num_train_epochs: float | None = option(
        None,
        "Passes over the training prompts (TRL's): the run is ceil(epochs x prompts / prompts per "
        "generation) generations. max_steps, when given, wins (as in TRL).",
        bound=POSITIVE,
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

    @property
    def needs_old_logps(self) -> bool:
        """Old log-probs differ from the current ones only if the policy moves before the batch is used up."""
        return self.num_iterations > 1 or self.mini_batches > 1

    def check_steps(self, num_generations: int) -> None:
        """TRL's batch options and step count: num_mini_batches read as steps_per_generation, whole groups of
        `num_generations` in every optimizer step, and max_steps (optimizer steps) a whole number of generations, from
        max_generations or 1000 when not given (num_train_epochs: resolved once the training split's size is known,
        resolve_length)."""
        G, B, acc = num_generations, self.per_device_train_batch_size, self.gradient_accumulation_steps
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

    def resolve_length(self, num_prompts: int, num_processes: int, unit: int) -> None:
        """num_train_epochs as max_steps, once the training split's size is known (TRL's rule: max_steps, when
        given, wins; a pass is the prompts over the prompts each generation draws (`unit` completions a prompt row),
        rounded up)."""
        if self.max_steps is not None:
            return
        per_generation = self.generation_size // unit * num_processes
        generations = max(1, math.ceil(self.num_train_epochs * num_prompts / per_generation))
        self.max_steps = generations * self.updates_per_generation


@dataclass
class OptimizerConfig(Options):
    """AdamW, its learning-rate schedule, the gradient clip, and what a non-finite loss or gradient does."""

    _argument_group_name: ClassVar[str] = "optimizer and schedule"

    learning_rate: float = option(2e-3, "AdamW learning rate.", bound=POSITIVE)
    lr_scheduler_type: str = option(
        "cosine", "cosine (to 0 at max_steps), linear or constant.", choices=("constant", "linear", "cosine")
    )
    warmup_steps: float = option(
        0,
        "Linear warm-up steps; a value in (0, 1) is a share of max_steps, rounded up (transformers 5's "
        "reading, where warmup_ratio is gone).",
        bound=NON_NEGATIVE,
    )
    warmup_ratio: float = option(
        0.0,
        "Warm-up as a share of max_steps, rounded up, when warmup_steps is 0 (TRL's name).",
        bound=PROBABILITY,
    )
    weight_decay: float = option(0.0, "AdamW weight decay.", bound=NON_NEGATIVE)
    adam_beta1: float = option(0.9, "AdamW beta1.", bound=Bound(0, 1, hi_open=True))
    adam_beta2: float = option(
        0.99,
        "AdamW beta2 (Loshchilov & Hutter 2019, Decoupled Weight Decay Regularization). 0.99, not TRL's (transformers') "
        "0.999: nanoGPT's value for its character-level model, whose steps see few tokens "
        "(config/train_shakespeare_char.py), and this project's default since its first run.",
        bound=Bound(0, 1, hi_open=True),
    )
    adam_epsilon: float = option(1e-8, "AdamW epsilon (TRL's name).", bound=POSITIVE)
    max_grad_norm: float = option(1.0, "Gradient-norm clip (0 = off).", bound=NON_NEGATIVE)
    on_nonfinite: str = option(
        "stop",
        "A NaN/inf loss or gradient: stop (keep the last checkpoint) or skip.",
        choices=("stop", "skip"),
    )

    def rules(self) -> None:
        if self.warmup_steps >= 1 and self.warmup_steps != int(self.warmup_steps):
            raise ConfigError(
                f"warmup_steps={self.warmup_steps:g} is neither a whole number of steps nor a share in (0, 1)"
            )

    def schedule(self, max_steps: int, updates_per_generation: int = 1) -> tuple[int, int]:
        """(steps, warm-up steps) of the learning-rate schedule, which steps once a generation of
        `updates_per_generation` optimizer steps (TRL steps it once an optimizer step; the same with the default of
        one a generation). Warm-up: warmup_steps, or else warmup_ratio of the steps rounded up (transformers reads them
        so; transformers 5 reads a warmup_steps in (0, 1) as that ratio)."""
        k, warmup = updates_per_generation, self.warmup_steps
        steps = max_steps // k
        if 0 < warmup < 1:
            return steps, math.ceil(warmup * steps)
        return steps, -(-int(warmup) // k) or math.ceil(self.warmup_ratio * steps)
