"""GRPOConfig: every option of a run, composed of the components' option groups, each option declared once with its
help, its bound or choices beside it (tinygrpo/base/options.py), under TRL's name and meaning where TRL has the
concept. A component is handed its group (`Group.of(config)`), never GRPOConfig:

    ModelConfig       model and data                  here: what a launch loads, checks and evaluates
    BatchConfig       batches and steps               tinygrpo/update/config.py
    SamplingParams    sampling                        tinygrpo/rollout/config.py (the decoder's settings)
    RolloutConfig     generation and exploration      tinygrpo/rollout/config.py
    AdvantageConfig   rewards and advantages          tinygrpo/algorithm/advantage_estimators.py
    LossConfig        loss, KL and entropy            tinygrpo/algorithm/policy_losses.py
    OptimizerConfig   optimizer and schedule          tinygrpo/update/config.py
    RunConfig         seed, threads and checks        here
    LoggingConfig     logging, evaluation and saving  here

Parsed as TRL's `TrlParser` does: `--config recipe.yaml` sets the parser's defaults and command-line flags override
them. `__post_init__` rejects a bad value with one line naming the field: each field's own rule, each group's rules
among its fields, then the rules that tie groups together (below).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tinygrpo.algorithm.advantage_estimators import AdvantageConfig
from tinygrpo.algorithm.group_sizes import per_group_estimator
from tinygrpo.algorithm.policy_losses import LossConfig
from tinygrpo.base.options import (
    AT_LEAST_1,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    Bound,
    ConfigError,
    Options,
    check_options,
    check_threads,
    option,
)
from tinygrpo.base.parser import GRPO_HINTS, parse_args
from tinygrpo.rollout.config import RolloutConfig, SamplingParams
from tinygrpo.update.config import BatchConfig, OptimizerConfig

# accelerate's trackers (`report_to`), each with the check that its package is installed.
TRACKERS = ("aim", "clearml", "comet_ml", "dvclive", "mlflow", "swanlab", "tensorboard", "trackio", "wandb")


def report_trackers(report_to: str) -> list[str]:
    """The trackers `report_to` names: "none", one of TRACKERS, several joined by commas, or "all" (every one whose
    package is installed, as transformers reads "all"). A ValueError names one that is unknown or not installed."""
    import accelerate.utils as au

    names = [n.strip() for n in str(report_to).split(",") if n.strip()]
    if names in ([], ["none"]):
        return []
    installed = [t for t in TRACKERS if getattr(au, f"is_{t}_available")()]
    if names == ["all"]:
        return installed
    for name in names:
        if name not in TRACKERS:
            raise ValueError(
                f"report_to={report_to}: unknown tracker {name!r} (none, all, or any of {', '.join(TRACKERS)}, "
                "joined by commas)"
            )
        if name not in installed:
            raise ValueError(f"report_to={report_to}: {name} needs its package (pip install {name})")
    return names


# The most generation rounds one step may run: the first, the explore rounds and the refills (see __post_init__).
MAX_ROUNDS_PER_STEP = 32


@dataclass
class ModelConfig(Options):
    """The model, its data and how it runs: what a launch loads, checks and evaluates."""

    _argument_group_name: ClassVar[str] = "model and data"

    task: str | None = option(
        None,
        "A task: a built-in name (reverse, countdown, ...), reasoning_gym:NAME, a file of your own "
        "(path/to/my_task.py, or my_task.py:NAME) or module:NAME. Its dataset, held-out verifier, reference and "
        "GRPO recipe become the defaults; a --config recipe and flags override them.",
    )
    model_name_or_path: str = option(
        "checkpoints/reference",
        "Directory of the initial policy (save_pretrained format). The default experiment trains "
        "it first (python train_sft.py) when it is missing.",
    )
    ref_model_name_or_path: str | None = option(
        None, "Reference policy for the KL term; default: the same as model_name_or_path."
    )
    dataset_name: str = option(
        "addition",
        "Problem set: a name under data/ (addition, seed_bank) or a directory "
        "of <split>.jsonl files with at least a 'prompt' column (TRL's name).",
    )
    dataset_train_split: str = option("train", "Split whose prompts GRPO trains on.")
    dataset_test_split: str | None = option(
        "test", "Held-out split for greedy accuracy (None or '' to skip evaluation)."
    )
    allow_overlapping_splits: bool = option(
        False,
        "Train and evaluate on splits that share prompts (a run stops at start-up otherwise, with the "
        "count and an example: held-out accuracy on prompts trained on measures memory, not generalisation).",
    )
    eval_reward: str | None = option(
        None,
        "The reward that decides held-out accuracy (right when it scores exactly 1.0): a registered name, "
        "module:function or file.py:function. Default: the task's verifier, or `accuracy` (the strict integer "
        "rule) for a dataset no task names. Every gold answer is checked to score 1.0 under it at start-up.",
    )
    grouped_forward: bool = option(
        True,
        "Use the model's grouped fast path when it has one (tiny_lm does): each prompt encoded once for "
        "its G completions, finished rows dropped from decoding, tokens after EOS never computed. Exact (tests "
        "compare it with the generic transformers forward); False forces the generic forward. Not used under "
        "FSDP, which shards the parameters the fast path reads.",
    )
    bf16: bool = option(
        False,
        "Run the forwards (sampling, reference, policy) under torch.autocast in bfloat16, as TRL's bf16 "
        "(mixed precision: weights, gradients and AdamW stay float32; log-probs are taken in float32). "
        "BFLOAT16 training: Kalamkar et al. 2019. For GPUs; on a CPU it is slower at these sizes.",
    )
    dtype: str = option(
        "float32",
        "The policy's and the reference's weights, and so every forward, backward and AdamW step: "
        "float32 or float64 (TRL's ModelConfig.dtype; bf16 above is the mixed-precision one). float64 is for "
        "checking the math: two computation orders of the same sums (the grouped and the generic forward, one "
        "process and two) agree to ~1e-12 in it, where float32's last bits differ from one CPU's kernels to "
        "another's (Goldberg 1991, What Every Computer Scientist Should Know About Floating-Point Arithmetic). "
        "Sampling and rewards are float32 either way.",
        choices=("float32", "float64"),
    )
    static_shapes: bool | None = option(
        None,
        "Decode and score with static shapes (CUDA graphs need them: launch-bound decoding; PyTorch's "
        "'Accelerating PyTorch with CUDA Graphs'): batches padded to a few buckets, finished rows masked rather "
        "than removed, the uniforms drawn at once and indexed on the device, no host read per decode step; the "
        "same completions (tinygrpo/rollout/static_decode.py, tinygrpo/model/static_shapes.py). None: on for "
        "CUDA, off on the CPU (benchmarks/static_decode.py measures both).",
    )
    cuda_graphs: bool = option(
        False,
        "Replay the static-shape decode, scoring and update as CUDA graphs: the decode's whole loop, "
        "captured once per bucket and sampling settings, one replay a rollout; the reference's and old policy's "
        "forwards, once per model and bucket; on one process, the policy's forward and backward in the update "
        "(torch.cuda.make_graphed_callables) (tinygrpo/rollout/static_decode.py, tinygrpo/model/static_shapes.py; "
        "PyTorch's 'Accelerating PyTorch with CUDA Graphs'). Needs a CUDA device and static shapes; the same "
        "completions. Off by default: not yet measured on a GPU (benchmarks/gpu.sh measures it).",
    )

    def rules(self) -> None:
        if self.bf16 and self.dtype != "float32":
            raise ConfigError(
                f"bf16 autocasts float32 weights to bfloat16; dtype={self.dtype} asks for {self.dtype} weights: "
                "set one of them"
            )
        if self.dataset_test_split in ("", "None", "none", "null"):  # (a command line cannot pass None)
            self.dataset_test_split = None


@dataclass
class RunConfig(Options):
    """The run's seed and threads, and the checks before the first step."""

    _argument_group_name: ClassVar[str] = "seed, threads and checks"

    seed: int = option(
        42,
        "Seed for data order, sampling and everything else.",
        bound=Bound(0, 2**32, hi_open=True, words="in [0, 2**32)"),
    )
    torch_num_threads: int = option(
        0, "torch threads per process (0 = cores / processes).", bound=NON_NEGATIVE
    )
    signal_forecast_prompts: int = option(
        256,
        "Before the first step, sample G completions of this many training prompts from the initial "
        "policy and print the share of groups whose rewards differ (the groups GRPO learns from; a prompt of "
        "pass rate p gives one with probability 1 - p^G - (1-p)^G, which dynamic sampling, DAPO, Yu et al. 2025, "
        "is built around) and pass@G. Its own generator: training samples what it would without it (0 = off).",
        bound=NON_NEGATIVE,
    )
    signal_forecast_min: float = option(
        0.2,
        "Below this forecast share of groups with signal, one line says so and what usually helps (a "
        "larger G, explore rounds, a partial-credit reward, a better reference or format).",
        bound=PROBABILITY,
    )

    def rules(self) -> None:
        check_threads("torch_num_threads", self.torch_num_threads)


@dataclass
class LoggingConfig(Options):
    """Where a run writes, what it logs and evaluates, and when it saves."""

    _argument_group_name: ClassVar[str] = "logging, evaluation and saving"

    output_dir: str = option("runs/default", "Where metrics, checkpoints, plots go.")
    overwrite_output_dir: bool = option(
        False, "Allow replacing an output_dir that already holds another run."
    )
    resume_from_checkpoint: str | None = option(
        None,
        "A checkpoint directory, or 'latest' (the newest complete one in output_dir; 'true' too, as TRL's "
        "resume_from_checkpoint=True).",
    )
    logging_steps: int = option(10, "Write metrics.jsonl and sample completions every N.", bound=AT_LEAST_1)
    eval_steps: int = option(
        50, "Held-out evaluation every N steps (and at 0 and the end).", bound=AT_LEAST_1
    )
    num_generations_eval: int | None = option(
        None,
        "Completions sampled per held-out prompt (TRL's): the evaluation also reports their mean "
        "accuracy (eval/sampled_accuracy) and pass@n, beside the greedy accuracy (eval_pass_k = n).",
        bound=AT_LEAST_1,
    )
    eval_pass_k: int = option(
        0, "Also report pass@k with k samples per prompt (0 = off).", bound=NON_NEGATIVE
    )
    logging_first_step: bool = option(False, "Also log the first optimizer step's row (TRL's).")
    save_steps: int = option(100, "Checkpoint every N steps (0 = only at the end).", bound=NON_NEGATIVE)
    save_total_limit: int = option(2, "Keep at most this many checkpoints.", bound=AT_LEAST_1)
    log_completions: bool = option(
        True,
        "Log a sample of each logging step's completions to completions.jsonl (TRL's log_completions; "
        "on by default here: the report draws them token by token).",
    )
    num_completions_to_print: int = option(
        16,
        "Completions logged per logging step: whole groups of the first round, those with signal first "
        "(TRL's name).",
        bound=NON_NEGATIVE,
    )
    report_to: str = option(
        "none",
        "Trackers that get every logged row, through accelerate (TRL's report_to): none, all (every one "
        "installed), or tensorboard, wandb, trackio, mlflow, comet_ml, aim, clearml, dvclive, swanlab, joined by "
        "commas.",
    )
    run_name: str | None = option(
        None, "The run's name for the trackers (TRL's run_name; default: output_dir's)."
    )
    metric_for_best_model: str | None = option(
        None,
        "The held-out metric that ranks evaluations for callbacks (transformers' name: `accuracy` is "
        "eval/accuracy), as EarlyStoppingCallback reads it.",
    )
    greater_is_better: bool | None = option(
        None,
        "Whether a larger metric_for_best_model is better (default, as transformers' TrainingArguments: yes, but no for a name ending in `loss`).",
    )
    disable_tqdm: bool = option(False, "No progress bar.")
    make_plots: bool = option(
        True,
        "Draw the figures at the end: plots.png and the report's (false: the report says where each "
        "would be; `python -m tinygrpo.run.report RUN_DIR` draws them later from the logs).",
    )
    make_report: bool = option(
        True,
        "Write report.html at the end (and when stopped): one self-contained page of the run "
        "(python -m tinygrpo.run.report RUN_DIR builds it for any run).",
    )

    def rules(self) -> None:
        if self.num_generations_eval is not None:
            if self.eval_pass_k not in (0, self.num_generations_eval):
                raise ConfigError(
                    f"num_generations_eval={self.num_generations_eval} and eval_pass_k={self.eval_pass_k} both say "
                    "how many completions of each held-out prompt are sampled: set one of them"
                )
            self.eval_pass_k = self.num_generations_eval
        try:  # (accelerate would warn and train on without the tracker the user asked for)
            report_trackers(self.report_to)
        except ValueError as e:
            raise ConfigError(str(e)) from None


@dataclass
class GRPOConfig(
    LoggingConfig,
    RunConfig,
    OptimizerConfig,
    LossConfig,
    AdvantageConfig,
    RolloutConfig,
    SamplingParams,
    BatchConfig,
    ModelConfig,
):
    """Every option of a GRPO run: the option groups' fields, flat (as TRL's GRPOConfig, `args.temperature`)."""

    # The fields have TRL's names (its ScriptArguments' and GRPOConfig's); a flag or recipe key of this repository's
    # earlier name is refused in one line that names the new one: {earlier name: field}.
    RENAMED: ClassVar[dict[str, str]] = {
        "dataset": "dataset_name",
        "train_split": "dataset_train_split",
        "eval_split": "dataset_test_split",
        "num_completions_to_log": "num_completions_to_print",
    }
    TRL_HINTS: ClassVar[dict[str, str]] = GRPO_HINTS  # TRL's options not taken here: what to use, or why

    def __post_init__(self) -> None:
        if self.max_steps == -1:  # (TRL's "not set": num_train_epochs decides)
            self.max_steps = None
        check_options(self)
        for group in GROUPS:
            group.rules(self)
        self.check_steps(self.num_generations)
        # The log-probs the loss reads are taken at the sampling temperature (they divide by it): greedy is for
        # evaluation only.
        if not POSITIVE.admits(self.temperature):
            raise ConfigError(f"temperature must be {POSITIVE.describe()}, got {self.temperature}")
        # pass@k over G samples: k = G leaves every advantage 0.
        if self.advantage_mode == "pass_at_k" and not 1 <= self.train_pass_k < self.num_generations:
            raise ConfigError(
                f"train_pass_k must be in [1, num_generations={self.num_generations}) (k = G leaves no signal), got "
                f"{self.train_pass_k}"
            )
        # An estimator defined on 0/1 rewards (pass@k) cannot take them less beta x the KL.
        if self.use_kl_in_reward and self.binary_rewards:
            raise ConfigError(
                f"advantage_mode {self.advantage_mode} needs rewards of 0 or 1, and use_kl_in_reward subtracts "
                "beta x the KL from them: put the KL in the loss (use_kl_in_reward false)"
            )
        self._check_rounds()
        self._check_allocation()

    def _check_rounds(self) -> None:
        """What a step costs: the first round, each explore round and each dynamic-sampling refill samples up to a
        whole generation (an explore round samples the failed prompts again: all of them, with a policy that solves
        none). A step is bounded to MAX_ROUNDS_PER_STEP rounds, so that it costs at most that many plain steps (the
        default: 1 + 3 + 3 = 7; every recipe and study uses at most 7)."""
        refills = self.max_dynamic_sampling_rounds if self.dynamic_sampling else 0
        rounds = 1 + self.explore_rounds + refills
        if rounds > MAX_ROUNDS_PER_STEP:
            n = self.generation_size
            raise ConfigError(
                f"explore_rounds={self.explore_rounds} and max_dynamic_sampling_rounds={refills} let one step sample "
                f"{rounds:,} rounds of up to {n:,} completions ({rounds * n:,} completions, the cost of {rounds:,} "
                f"plain steps); at most {MAX_ROUNDS_PER_STEP} rounds a step: lower explore_rounds or "
                "max_dynamic_sampling_rounds"
            )

    def _check_allocation(self) -> None:
        """sample_allocation other than fixed gives prompts groups of different sizes: an estimator computed group by
        group (tinygrpo/algorithm/group_sizes.py), and pass@k's k below the unit."""
        if self.sample_allocation == "fixed":
            return
        what = f"sample_allocation {self.sample_allocation}"
        if not per_group_estimator(AdvantageConfig.of(self)):
            raise ConfigError(
                f"{what} gives prompts groups of different sizes, whose advantages are computed group by group: "
                f"advantage_mode {self.advantage_mode} with scale_rewards {self.scale_rewards} and "
                f"multi_objective_aggregation {self.multi_objective_aggregation} reads the whole batch (use "
                "scale_rewards group or none, an estimator other than reinforce_pp, and sum_then_normalize)"
            )
        if self.advantage_mode == "pass_at_k" and self.train_pass_k >= self.allocation_unit:
            raise ConfigError(
                f"{what}: advantage_mode pass_at_k needs train_pass_k < allocation_unit={self.allocation_unit}"
            )

    def training_arguments(self):
        """This config as a `transformers.TrainingArguments`: the `args` a TrainerCallback reads (TRL's GRPOConfig is
        one)."""
        import torch
        from transformers import TrainingArguments

        return TrainingArguments(
            output_dir=self.output_dir,
            max_steps=self.max_steps,
            logging_steps=self.logging_steps,
            eval_strategy="steps" if self.dataset_test_split else "no",
            eval_steps=self.eval_steps,
            save_strategy="steps",
            save_steps=self.save_steps or self.max_steps,
            save_total_limit=self.save_total_limit,
            learning_rate=self.learning_rate,
            seed=self.seed,
            run_name=self.run_name,
            metric_for_best_model=self.metric_for_best_model,
            greater_is_better=self.greater_is_better,
            report_to="none",
            disable_tqdm=self.disable_tqdm,
            # The run's own accelerate state, as its Accelerator set it up (left as it is: not reset, not placed again)
            accelerator_config={"use_configured_state": True},
            use_cpu=not torch.cuda.is_available(),
        )


GROUPS: tuple[type[Options], ...] = (
    ModelConfig,
    BatchConfig,
    SamplingParams,
    RolloutConfig,
    AdvantageConfig,
    LossConfig,
    OptimizerConfig,
    RunConfig,
    LoggingConfig,
)


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of `--flag v` or `--flag=v` in a command line, before it is parsed (None if absent)."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.removeprefix(flag + "=")
    return None


def task_defaults(spec: str) -> tuple[list[str], dict[str, object]]:
    """What `--task SPEC` sets: its GRPO recipe file (if it has one), then its inline recipe, its dataset and its
    reference (`tinygrpo/data/task.py`)."""
    from tinygrpo.data.task import get_task

    try:
        task = get_task(spec)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    defaults: dict[str, object] = {"task": spec, "dataset_name": task.dataset}
    if task.reference is not None and "output_dir" in task.reference:
        defaults["model_name_or_path"] = task.reference["output_dir"]
    if not task.config:  # (a one-file task: its verifier is its reward unless its recipe says otherwise)
        defaults["reward_funcs"] = [task.correct]
    defaults.update(task.grpo or {})
    return ([task.config] if task.config else []), defaults


def recipe_task(path: str | None) -> str | None:
    """The `task:` a --config recipe names, if any (read again, checked, by the parser)."""
    if not path:
        return None
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # (the parser says what is wrong with the file, in one line)
    task = data.get("task") if isinstance(data, dict) else None
    return task if isinstance(task, str) else None


def check_task_flag(argv: list[str]) -> None:
    """`--task ''`: said, not taken for no task (which would train the default one), in both entry points."""
    if flag_value(argv, "--task") is not None and not flag_value(argv, "--task").strip():
        raise ConfigError(
            "--task is empty: name a task (a built-in name, a file, module:NAME) or leave the flag out"
        )


def parse_config(argv: list[str] | None = None) -> GRPOConfig:
    """`--task NAME` sets the task's defaults, `--config file.yaml` (optional, anywhere in argv) overrides them, and
    flags override both (tinygrpo/base/parser.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    check_task_flag(argv)
    spec = flag_value(argv, "--task") or recipe_task(flag_value(argv, "--config"))
    recipes, defaults = task_defaults(spec) if spec else ([], {})
    return parse_args(GRPOConfig, argv, "Token-level GRPO on a tiny transformer.", defaults, recipes)
