"""The SFT reference's options (SFTConfig: TRL's names where TRL has the concept, a task's recipe by name), and
their single-field checks (the same loop and messages as GRPOConfig's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tiny_lm.tokenization_tiny_lm import DEFAULT_CHARS
from tinygrpo.rollout.environment import get_environment
from tinygrpo.run import trl_names
from tinygrpo.run.checks import Bound, ConfigError, check_fields, check_threads
from tinygrpo.run.config import BOUNDS


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
    TRL_HINTS: ClassVar[dict[str, str]] = trl_names.SFT  # TRL's options not taken here: what to use, or why
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
        **dict.fromkeys("seed torch_num_threads".split(), "seed and threads"),
        **dict.fromkeys("output_dir overwrite_output_dir logging_steps".split(), "logging and saving"),
    }

    task: str = field(
        default="",
        metadata={
            "help": "A task's reference recipe (tinygrpo/data/tasks/): its dataset, characters, model size and budget "
            "become the defaults, and flags override them. '' = addition's recipe, this config's own defaults."
        },
    )
    output_dir: str = field(
        default="checkpoints/reference", metadata={"help": "Where model + tokenizer are saved."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Allow replacing a model that output_dir already holds."}
    )
    dataset_name: str = field(
        default="addition",
        metadata={"help": "Problem set name or directory of <split>.jsonl."},
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    completion_column: str = field(
        default="answer",
        metadata={"help": "The column that holds each training problem's target completion (without <eos>)."},
    )
    mix_column: str = field(
        default="",
        metadata={
            "help": "A second column of target completions (a worked format, say) that a share of the training "
            "problems imitate instead: the mixed reference of the reasoning experiment (docs/reasoning.md; "
            "DeepSeek-R1's cold start, arXiv 2501.12948, uses a few worked examples the same way)."
        },
    )
    mix_share: float = field(
        default=0.0,
        metadata={
            "help": "The share of the training problems (a fixed, seeded choice) whose target is mix_column's; "
            "0 = none."
        },
    )
    environment: str = field(
        default="",
        metadata={
            "help": "An environment whose calls the targets contain (tinygrpo/rollout/environments/: calculator): each "
            "call's reply is the environment's, so it is left out of the loss, as GRPO leaves it (TRL's tool_mask), "
            "and must be what the environment answers; the held-out completions call it. '' = none."
        },
    )
    dataset_test_split: str = field(
        default="test",
        metadata={"help": "Held-out split for greedy accuracy ('' = none)."},
    )
    allow_overlapping_splits: bool = field(
        default=False,
        metadata={
            "help": "Evaluate on a held-out split that shares prompts with the rows trained on (refused otherwise: "
            "accuracy on trained prompts measures memory), as GRPO's option of this name."
        },
    )
    train_size: int = field(
        default=400,
        metadata={"help": "Train on this many problems (a fixed sample of the split); 0 = all of it."},
    )
    max_steps: int = field(default=1000, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(
        default=128, metadata={"help": "Sequences per step (TRL's SFTConfig name; batch_size also accepted)."}
    )
    learning_rate: float = field(default=3e-3, metadata={"help": "AdamW learning rate."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    lr_scheduler_type: str = field(
        default="constant",
        metadata={
            "help": "constant, or cosine (decayed to a tenth of the rate over max_steps). The default experiment's reference keeps a constant rate: decayed, it memorises its "
            "400 problems into a sharper reference that GRPO improves more slowly."
        },
    )
    n_layer: int = field(default=2, metadata={"help": "Transformer blocks."})
    n_embd: int = field(default=64, metadata={"help": "Model width."})
    n_head: int = field(default=4, metadata={"help": "Attention heads."})
    torch_num_threads: int = field(
        default=1,
        metadata={
            "help": "torch threads (0 = torch's default; threads also accepted). 1 by default: the float sums' order, and so the "
            "reference's weights, are then the same whether `python train_sft.py`, `python train_grpo.py` or "
            "`accelerate launch train_grpo.py` (one thread a process) trains it; at this size one thread is as fast."
        },
    )
    kernels: str = field(
        default="portable",
        metadata={
            "help": "portable or native: the CPU kernels the reference trains on. torch's x86 builds pick ATen's, "
            "MKL's and oneDNN's kernels by instruction set (AVX-512, AVX2, ...), each summing in its own order, and a "
            "reference trained partway amplifies those last bits into another model (the default one's held-out "
            "accuracy moved by 11 points between CPUs, in float64 too). portable trains in a process on the kernels "
            "every x86-64 CPU runs alike (ATen's generic ones, MKL's conditional numerical reproducibility mode "
            "MKL_CBWR=COMPATIBLE, oneDNN at SSE4.1: tinygrpo.run.sft.PORTABLE), so that every such CPU trains the same "
            "reference; native trains in this process on its own kernels, faster (Intel, MKL developer reference: "
            "'Obtaining Numerically Reproducible Results')."
        },
    )
    n_positions: int = field(default=32, metadata={"help": "Context length (prompt + completion)."})
    chars: str = field(default=DEFAULT_CHARS, metadata={"help": "Tokenizer characters (plus <pad>, <eos>)."})
    seed: int = field(
        default=0,
        metadata={
            "help": "Seed for the sample of problems, init and batches (0, not TRL's 42: every reference here, and "
            "so every published number, was trained with it)."
        },
    )
    label_smoothing_factor: float = field(
        default=0.0,
        metadata={
            "help": "Cross-entropy label smoothing (keeps the reference's sampling diverse; transformers' name, also "
            "--label_smoothing)."
        },
    )
    logging_steps: int = field(
        default=100, metadata={"help": "Print the loss every N steps (0 = never; log_every also accepted)."}
    )

    def __post_init__(self) -> None:
        check_fields(self, SFT_BOUNDS, SFT_CHOICES)  # the same checks, messages and loop as GRPOConfig's
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


SFT_CHOICES = {"lr_scheduler_type": ("constant", "cosine"), "kernels": ("portable", "native")}
# Single-field bounds, checked in this order by tinygrpo.run.config.check_fields (after the finite-number check), as
# GRPOConfig's BOUNDS: "{name} must be {bound.describe()}, got {value}".
SFT_BOUNDS: dict[str, Bound] = {
    **dict.fromkeys(
        ("max_steps", "per_device_train_batch_size", "n_layer", "n_embd", "n_head", "n_positions"), Bound(1)
    ),
    "train_size": Bound(0),  # 0 = the whole split
    "learning_rate": Bound(0, lo_open=True),
    "weight_decay": Bound(0),
    "torch_num_threads": Bound(0),  # 0 = torch's default
    "seed": BOUNDS["seed"],  # numpy and torch take 32-bit seeds
    "label_smoothing_factor": Bound(0, 1),  # the probability mass moved from the label to the other tokens
    "mix_share": Bound(0, 1),
    "logging_steps": Bound(0),  # 0 = never
}
