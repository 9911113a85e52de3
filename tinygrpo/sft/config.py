"""The SFT reference's options (SFTConfig: TRL's names where TRL has the concept, a task's recipe by name), and
their single-field checks (the same loop and messages as GRPOConfig's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tiny_lm.tokenization_tiny_lm import DEFAULT_CHARS
from tinygrpo.base.options import (
    AT_LEAST_1,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    Bound,
    ConfigError,
    check_options,
    check_threads,
    option,
)
from tinygrpo.base.parser import SFT_HINTS
from tinygrpo.rollout.environment import get_environment


@dataclass
class SFTConfig:
    # The fields have TRL's names; a flag or recipe key of this script's earlier name is refused in one line that
    # names the new one: {earlier name: field}.
    RENAMED: ClassVar[dict[str, str]] = {
        "dataset": "dataset_name",
        "train_split": "dataset_train_split",
        "eval_split": "dataset_test_split",
        "batch_size": "per_device_train_batch_size",
        "threads": "torch_num_threads",
        "log_every": "logging_steps",
        "label_smoothing": "label_smoothing_factor",
        "cosine_decay": "lr_scheduler_type",
    }
    TRL_HINTS: ClassVar[dict[str, str]] = SFT_HINTS  # TRL's options not taken here: what to use, or why
    # --help's groups, the same titles as train_grpo.py's where they hold the same kind of option
    ARGUMENT_GROUPS: ClassVar[dict[str, str]] = {
        **dict.fromkeys(
            "task dataset_name dataset_train_split dataset_test_split completion_column mix_column mix_share environment "
            "allow_overlapping_splits train_size chars".split(),
            "model and data",
        ),
        **dict.fromkeys("n_layer n_embd n_head n_positions kernels".split(), "model and data"),
        **dict.fromkeys("max_steps per_device_train_batch_size".split(), "batches and steps"),
        **dict.fromkeys(
            "learning_rate weight_decay lr_scheduler_type label_smoothing_factor".split(),
            "optimizer and schedule",
        ),
        **dict.fromkeys("seed torch_num_threads".split(), "seed, threads and checks"),
        **dict.fromkeys(
            "output_dir overwrite_output_dir logging_steps".split(), "logging, evaluation and saving"
        ),
    }

    task: str = option(
        "",
        "A task's reference recipe (tinygrpo/data/tasks/): its dataset, characters, model size and budget "
        "become the defaults, and flags override them. '' = addition's recipe, this config's own defaults.",
    )
    output_dir: str = option("checkpoints/reference", "Where model + tokenizer are saved.")
    overwrite_output_dir: bool = option(False, "Allow replacing a model that output_dir already holds.")
    dataset_name: str = option("addition", "Problem set name or directory of <split>.jsonl.")
    dataset_train_split: str = option("train", "Split to train on.")
    completion_column: str = option(
        "answer", "The column that holds each training problem's target completion (without <eos>)."
    )
    mix_column: str = option(
        "",
        "A second column of target completions (a worked format, say) that a share of the training "
        "problems imitate instead: the mixed reference of the reasoning experiment (docs/reasoning.md; "
        "DeepSeek-R1's cold start, arXiv 2501.12948, uses a few worked examples the same way).",
    )
    mix_share: float = option(
        0.0,
        "The share of the training problems (a fixed, seeded choice) whose target is mix_column's; 0 = none.",
        bound=PROBABILITY,
    )
    environment: str = option(
        "",
        "An environment whose calls the targets contain (tinygrpo/rollout/environments/: calculator): each "
        "call's reply is the environment's, so it is left out of the loss, as GRPO leaves it (TRL's tool_mask), "
        "and must be what the environment answers; the held-out completions call it. '' = none.",
    )
    dataset_test_split: str = option("test", "Held-out split for greedy accuracy ('' = none).")
    allow_overlapping_splits: bool = option(
        False,
        "Evaluate on a held-out split that shares prompts with the rows trained on (refused otherwise: "
        "accuracy on trained prompts measures memory), as GRPO's option of this name.",
    )
    train_size: int = option(
        400, "Train on this many problems (a fixed sample of the split); 0 = all of it.", bound=NON_NEGATIVE
    )
    max_steps: int = option(1000, "Optimizer steps.", bound=AT_LEAST_1)
    per_device_train_batch_size: int = option(
        128, "Sequences per step (TRL's SFTConfig name).", bound=AT_LEAST_1
    )
    learning_rate: float = option(3e-3, "AdamW learning rate.", bound=POSITIVE)
    weight_decay: float = option(0.0, "AdamW weight decay.", bound=NON_NEGATIVE)
    lr_scheduler_type: str = option(
        "constant",
        "constant, or cosine (decayed to a tenth of the rate over max_steps). The default experiment's reference keeps a constant rate: decayed, it memorises its "
        "400 problems into a sharper reference that GRPO improves more slowly.",
        choices=("constant", "cosine"),
    )
    n_layer: int = option(2, "Transformer blocks.", bound=AT_LEAST_1)
    n_embd: int = option(64, "Model width.", bound=AT_LEAST_1)
    n_head: int = option(4, "Attention heads.", bound=AT_LEAST_1)
    torch_num_threads: int = option(
        1,
        "torch threads (0 = torch's default). 1 by default: the float sums' order, and so the "
        "reference's weights, are then the same whether `python train_sft.py`, `python train_grpo.py` or "
        "`accelerate launch train_grpo.py` (one thread a process) trains it; at this size one thread is as fast.",
        bound=NON_NEGATIVE,
    )
    kernels: str = option(
        "portable",
        "portable or native: the CPU kernels the reference trains on. torch's x86 builds pick ATen's, "
        "MKL's and oneDNN's kernels by instruction set (AVX-512, AVX2, ...), each summing in its own order, and a "
        "reference trained partway amplifies those last bits into another model (the default one's held-out "
        "accuracy moved by 11 points between CPUs, in float64 too). portable trains in a process on the kernels "
        "meant to run alike on every x86-64 CPU (ATen's generic ones, MKL's conditional numerical reproducibility "
        "mode MKL_CBWR=COMPATIBLE, oneDNN at SSE4.1: tinygrpo.sft.train.PORTABLE): the same reference whichever "
        "kernels the process starts on, though not yet on every CPU (docs/default.md); native trains in this process on its own kernels, faster (Intel, MKL developer reference: "
        "'Obtaining Numerically Reproducible Results').",
        choices=("portable", "native"),
    )
    n_positions: int = option(32, "Context length (prompt + completion).", bound=AT_LEAST_1)
    chars: str = option(DEFAULT_CHARS, "Tokenizer characters (plus <pad>, <eos>).")
    seed: int = option(
        0,
        "Seed for the sample of problems, init and batches (0, not TRL's 42: every reference here, and "
        "so every published number, was trained with it).",
        bound=Bound(0, 2**32, hi_open=True, words="in [0, 2**32)"),
    )
    label_smoothing_factor: float = option(
        0.0,
        "Cross-entropy label smoothing (keeps the reference's sampling diverse; transformers' name).",
        bound=PROBABILITY,
    )
    logging_steps: int = option(100, "Print the loss every N steps (0 = never).", bound=NON_NEGATIVE)

    def __post_init__(self) -> None:
        check_options(self)  # the same checks, messages and loop as GRPOConfig's
        check_threads("torch_num_threads", self.torch_num_threads)
        if self.mix_share > 0 and not self.mix_column:
            raise ConfigError(f"mix_share={self.mix_share} needs mix_column: the column its problems imitate")
        if self.environment:
            try:
                env = get_environment(self.environment)
            except ValueError as e:
                raise ConfigError(f"environment: {e}") from None
            missing = env.missing_chars(self.chars)
            if missing:
                raise ConfigError(
                    f"environment {self.environment}: its calls and replies use {missing!r}, outside chars "
                    f"{self.chars!r}"
                )

    @classmethod
    def for_task(cls, name: str, **overrides) -> SFTConfig:
        """The reference recipe of task `name` (ValueError if it has none), with `overrides` on top."""
        return cls(**{**task_recipe(name), **overrides, "task": name})


def task_recipe(name: str) -> dict:
    """The SFTConfig fields of task `name`'s reference recipe; a ValueError for an unknown task or one without."""
    from tinygrpo.data.task import get_task

    task = get_task(name)
    if task.reference is None:
        raise ValueError(
            f"task {name!r} has no reference recipe of its own: its GRPO recipe ({task.config}) starts from the "
            "model it names"
        )
    recipe = {"dataset_name": task.dataset, "chars": task.chars, **task.reference}
    return recipe
