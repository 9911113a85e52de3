"""GRPOConfig: every knob of a run, with TRL's names and meanings where TRL has the concept.

Parsed as TRL's `TrlParser` does: `--config recipe.yaml` sets the parser's defaults and command-line flags override
them. Every field has a help text (`python train_grpo.py --help`); `__post_init__` rejects bad values with a message
that names the field and the allowed values: single-field bounds and choices from the tables BOUNDS and CHOICES,
rules that tie fields together one by one below them.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

import torch

from tinygrpo.algorithm.advantage_estimators import (
    ADV_ESTIMATORS,
    MULTI_OBJECTIVE_AGGREGATIONS,
    needs_binary_rewards,
)
from tinygrpo.algorithm.allocation import SAMPLE_ALLOCATIONS
from tinygrpo.algorithm.core import IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, SCALE_REWARDS
from tinygrpo.algorithm.policy_losses import POLICY_LOSSES, ppo_clip_loss
from tinygrpo.rollout.prompt_stats import PROMPT_SAMPLERS
from tinygrpo.run import trl_names
from tinygrpo.run.callbacks import report_trackers
from tinygrpo.run.checks import (
    AT_LEAST_1,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    Bound,
    ConfigError,
    check_fields,
    check_threads,
    each,
)
from tinygrpo.run.options_rollout import (
    DEFAULT_EXPLORE_TEMPERATURES,
    Exploration,
    ModelAndData,
    RewardsAndAdvantages,
    Sampling,
)
from tinygrpo.run.options_run import BatchesAndSteps, Checks, SeedAndThreads
from tinygrpo.run.options_update import KLAndEntropy, LoggingAndSaving, Loss, Optimizer
from tinygrpo.run.recipe import parse_args

__all__ = [
    "BOUNDS",
    "CHOICES",
    "Bound",
    "ConfigError",
    "GRPOConfig",
    "check_fields",
    "check_threads",
    "parse_config",
]


# Single-field bounds, checked in this order by one loop in __post_init__ (after the finite-number check). The
# message is "{name} must be {bound.describe()}, got {value}". None (an Optional field left unset) is not checked.
BOUNDS: dict[str, Bound] = {
    "seed": Bound(0, 2**32, hi_open=True, words="in [0, 2**32)"),  # numpy and torch take 32-bit seeds
    "num_generations": Bound(2, words=">= 2 (a group needs a baseline)"),
    "steps_per_generation": AT_LEAST_1,
    **each(AT_LEAST_1, "gradient_accumulation_steps num_mini_batches max_generations num_generations_eval"),
    "num_train_epochs": POSITIVE,
    # counts of tokens, steps and passes, and intervals between events (an interval of 0 would never fire)
    **each(AT_LEAST_1, "max_completion_length max_steps num_iterations logging_steps eval_steps"),
    "per_device_train_batch_size": AT_LEAST_1,  # (0 or -G would pass the whole-groups rule, and crash the first step)
    # counts where 0 means "none" or "off" (save_steps 0: only at the end; top_k 0: every token; threads 0: auto)
    **each(NON_NEGATIVE, "save_steps warmup_steps eval_pass_k top_k num_completions_to_print"),
    **each(NON_NEGATIVE, "torch_num_threads max_dynamic_sampling_rounds signal_forecast_prompts"),
    "signal_forecast_min": PROBABILITY,  # a share of groups
    "save_total_limit": AT_LEAST_1,  # the newest checkpoint is always kept
    "temperature": POSITIVE,  # log-probs divide by it (0 would be greedy)
    "top_p": Bound(0, 1, lo_open=True),  # a probability mass; 0 keeps no token
    "min_p": Bound(0, 1, hi_open=True),  # a share of the top token's probability; 1 would keep ties only
    "repetition_penalty": POSITIVE,  # logits are divided by it
    # PPO's clip range [1 - epsilon, 1 + epsilon_high] must have room on both sides of the ratio 1
    **each(POSITIVE, "epsilon epsilon_high"),
    "beta": NON_NEGATIVE,  # a negative KL coefficient pushes AWAY from the reference
    # sapo's gate divides by its temperatures; vespo's Gamma weight must decay in w (lambda > 0), its power k may
    # be 0; the adaptive entropy control's bounds, step and target are non-negative quantities
    **each(POSITIVE, "sapo_temperature_pos sapo_temperature_neg vespo_lambda_pos vespo_lambda_neg"),
    **each(NON_NEGATIVE, "vespo_k_pos vespo_k_neg entropy_coef_min entropy_coef_delta entropy_target"),
    "off_policy_mask_threshold": POSITIVE,  # a KL threshold: None (not 0) turns the mask off
    "top_entropy_quantile": PROBABILITY,
    "learning_rate": POSITIVE,
    "weight_decay": NON_NEGATIVE,
    "adam_epsilon": POSITIVE,  # AdamW divides by sqrt(v) + epsilon
    "warmup_ratio": PROBABILITY,  # a share of max_steps
    **each(Bound(0, 1, hi_open=True), "adam_beta1 adam_beta2"),  # EMA decays: 1 would never update
    "max_grad_norm": NON_NEGATIVE,  # 0 = no clip
    "ref_model_mixup_alpha": PROBABILITY,  # a convex combination's weight
    "ref_model_sync_steps": AT_LEAST_1,
    "prompt_sampler_floor": POSITIVE,  # so that every prompt keeps a chance to be drawn
    "pass_rate_ema": Bound(0, 1, lo_open=True),  # an EMA's weight: 0 would never learn a pass rate
    "screen_hard_below": PROBABILITY,
    "explore_rounds": NON_NEGATIVE,
    "allocation_unit": AT_LEAST_1,  # samples per unit of sample_allocation
    "max_num_generations": Bound(2, words=">= 2 (a group needs a baseline)"),
    "max_tool_calling_iterations": NON_NEGATIVE,  # 0: calls are never answered
    # temperatures of the explore rounds (log-probs divide by them); the list must not be empty
    "explore_temperatures": Bound(0, lo_open=True, words="positive numbers"),
    "explore_importance_sampling_clip_max": POSITIVE,  # a cap on weights that are > 0
}

# epsilon's range under PPO's clip (a rule below: other loss types read epsilon otherwise).
PPO_EPSILON = Bound(0, 1, lo_open=True, hi_open=True)
# The most generation rounds one step may run: the first, the explore rounds and the refills (see __post_init__).
MAX_ROUNDS_PER_STEP = 32

# Fields that name one of a fixed set of things: "{name}={value!r} is not one of {', '.join(allowed)}".
# The registries' live names: a loss or estimator registered after this module is loaded is a valid choice too.
CHOICES: dict[str, Collection[str]] = {
    "prompt_sampler": PROMPT_SAMPLERS,
    "sample_allocation": SAMPLE_ALLOCATIONS,
    "loss_type": POLICY_LOSSES.keys(),
    "kl_estimator": KL_ESTIMATORS,
    "advantage_mode": ADV_ESTIMATORS.keys(),
    "multi_objective_aggregation": MULTI_OBJECTIVE_AGGREGATIONS,
    "scale_rewards": SCALE_REWARDS,
    "importance_sampling_level": IMPORTANCE_SAMPLING_LEVELS,
    "lr_scheduler_type": ("constant", "linear", "cosine"),
    "on_nonfinite": ("stop", "skip"),
    "dtype": ("float32", "float64"),
}


@dataclass
class GRPOConfig(
    LoggingAndSaving,
    Checks,
    SeedAndThreads,
    Optimizer,
    KLAndEntropy,
    Loss,
    Exploration,
    RewardsAndAdvantages,
    Sampling,
    BatchesAndSteps,
    ModelAndData,
):
    """Every option of a GRPO run, in argument groups (one mixin each: options_rollout.py, options_update.py); the
    rules that tie fields together and the properties derived from them."""

    # The fields have TRL's names (its ScriptArguments' and GRPOConfig's); a flag or recipe key of this repository's
    # earlier name is refused in one line that names the new one: {earlier name: field}.
    RENAMED: ClassVar[dict[str, str]] = {
        "dataset": "dataset_name",
        "train_split": "dataset_train_split",
        "eval_split": "dataset_test_split",
        "num_completions_to_log": "num_completions_to_print",
    }
    TRL_HINTS: ClassVar[dict[str, str]] = trl_names.GRPO  # TRL's options not taken here: what to use, or why

    def __post_init__(self) -> None:
        if self.max_steps == -1:  # (TRL's "not set": num_train_epochs decides)
            self.max_steps = None
        check_fields(self, BOUNDS, CHOICES)
        check_threads("torch_num_threads", self.torch_num_threads)
        # Each explore round's rows carry their temperature as a float32 tensor (Batch.temperature).
        too_hot = [t for t in self.explore_temperatures if t > torch.finfo(torch.float32).max]
        if too_hot:
            raise ConfigError(
                f"explore_temperatures holds {too_hot[0]}, beyond float32's range (at most 3.4e+38): give temperatures "
                "a float32 can hold"
            )
        try:  # (accelerate would warn and train on without the tracker the user asked for)
            report_trackers(self.report_to)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        # Rules that tie fields together (each field is in range by now).
        if self.bf16 and self.dtype != "float32":
            raise ConfigError(
                f"bf16 autocasts float32 weights to bfloat16; dtype={self.dtype} asks for {self.dtype} weights: "
                "set one of them"
            )
        self._check_batches_and_steps()
        if self.num_generations_eval is not None:
            if self.eval_pass_k not in (0, self.num_generations_eval):
                raise ConfigError(
                    f"num_generations_eval={self.num_generations_eval} and eval_pass_k={self.eval_pass_k} both say "
                    "how many completions of each held-out prompt are sampled: set one of them"
                )
            self.eval_pass_k = self.num_generations_eval
        if not self.shuffle_dataset and self.prompt_sampler != "uniform":
            raise ConfigError(
                f"shuffle_dataset false draws the prompts in the dataset's order, which prompt_sampler "
                f"{self.prompt_sampler} does not (it chooses by pass rate): set prompt_sampler uniform"
            )
        # PPO's clip (core.clipped_surrogate: the loss types registered with ppo_clip_loss) keeps the ratio within
        # [1 - epsilon, 1 + epsilon_high]: epsilon >= 1 leaves it no lower side, and the first update off the
        # sampling policy fails. (cispo reads epsilon as a cap on the weight and gmpo as a clip of log-ratios, where
        # values >= 1 mean something.) Checked even where the ratio is exactly 1 and the clip never acts.
        if POLICY_LOSSES[self.loss_type].fn is ppo_clip_loss and not PPO_EPSILON.admits(self.epsilon):
            raise ConfigError(
                f"epsilon must be {PPO_EPSILON.describe()} for loss_type {self.loss_type} (its clip range starts at "
                f"1 - epsilon), got {self.epsilon}"
            )
        # Two-sided GRPO's cap on the unclipped ratio must lie above the clip range, or it clips inside it.
        if self.delta is not None and not self.delta > 1 + (self.epsilon_high or self.epsilon):
            raise ConfigError(f"delta must be > 1 + epsilon_high, got {self.delta}")
        # Adaptive entropy control moves the coefficient within [min, max]: an empty interval.
        if not self.entropy_coef_min <= self.entropy_coef_max:
            raise ConfigError(
                f"entropy_coef_min={self.entropy_coef_min} must be <= entropy_coef_max={self.entropy_coef_max}"
            )
        # train_pass_k is pass@k's: set for another mode it would do nothing, silently.
        default_k = next(f.default for f in fields(self) if f.name == "train_pass_k")
        if self.advantage_mode != "pass_at_k" and self.train_pass_k != default_k:
            raise ConfigError(
                f"train_pass_k={self.train_pass_k} is read by advantage_mode pass_at_k only; this run's is "
                f"{self.advantage_mode}"
            )
        # pass@k over G samples: k = G leaves every advantage 0.
        if self.advantage_mode == "pass_at_k" and not 1 <= self.train_pass_k < self.num_generations:
            raise ConfigError(
                f"train_pass_k must be in [1, num_generations={self.num_generations}) (k = G leaves no signal), got "
                f"{self.train_pass_k}"
            )
        # A run needs a reward; reward_weights pairs with reward_funcs one to one.
        if not self.reward_funcs:
            raise ConfigError("reward_funcs is empty: give at least one reward function")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ConfigError(
                f"reward_weights has {len(self.reward_weights)} values for {len(self.reward_funcs)} reward_funcs"
            )
        # All weights 0: every combined reward is 0, every group has zero variance, and no step has anything to
        # learn from (the run would finish with rc 0 and the weights it started with).
        if self.reward_weights is not None and not any(self.reward_weights):
            raise ConfigError(
                f"reward_weights are all 0 ({self.reward_weights}): every combined reward would be 0 and the run "
                "could not learn anything; give at least one reward function a non-zero weight"
            )
        # An estimator defined on 0/1 rewards (pass@k) cannot take them less beta x the KL.
        if self.use_kl_in_reward and needs_binary_rewards(self):
            raise ConfigError(
                f"advantage_mode {self.advantage_mode} needs rewards of 0 or 1, and use_kl_in_reward subtracts "
                "beta x the KL from them: put the KL in the loss (use_kl_in_reward false)"
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
        # What a step costs: the first round, each explore round and each dynamic-sampling refill samples up to a
        # whole generation (an explore round samples the failed prompts again: all of them, with a policy that
        # solves none). A step is bounded to MAX_ROUNDS_PER_STEP rounds, so that it costs at most that many plain
        # steps (the default: 1 + 3 + 3 = 7; every recipe and study uses at most 7).
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
        self._check_allocation()
        if self.environment in ("", "None", "none", "null"):
            self.environment = None
        if self.environment is not None:
            from tinygrpo.rollout.environment import get_environment

            try:
                get_environment(self.environment)
            except ValueError as e:
                raise ConfigError(f"environment: {e}") from None
        # A command line cannot pass None: "" or the word None means "no evaluation split".
        if self.dataset_test_split in ("", "None", "none", "null"):
            self.dataset_test_split = None
        # The KL in the reward and the reference's sync both need a reference, which beta == 0 does not build.
        if self.use_kl_in_reward and self.beta == 0:
            raise ConfigError("use_kl_in_reward needs beta > 0 (the KL's coefficient in the reward)")
        if self.sync_ref_model and self.beta == 0:
            raise ConfigError("sync_ref_model needs beta > 0 (with beta == 0 there is no reference)")

    def _check_allocation(self) -> None:
        """sample_allocation other than fixed: units that divide G and the cap, and an estimator computed group by
        group (groups then differ in size: tinygrpo/algorithm/group_sizes.py)."""
        if self.sample_allocation == "fixed":
            return
        from tinygrpo.algorithm.advantage_estimators import AdvantageConfig
        from tinygrpo.algorithm.group_sizes import per_group_estimator

        what = f"sample_allocation {self.sample_allocation}"
        G, U, cap = self.num_generations, self.allocation_unit, self.max_num_generations
        if G % U or cap % U or cap < G:
            raise ConfigError(
                f"{what}: allocation_unit={U} must divide num_generations={G} and max_num_generations={cap}, and "
                f"max_num_generations must be at least num_generations"
            )
        if not per_group_estimator(
            AdvantageConfig.from_config(self, [1.0] * len(self.reward_funcs or [None]))
        ):
            raise ConfigError(
                f"{what} gives prompts groups of different sizes, whose advantages are computed group by group: "
                f"advantage_mode {self.advantage_mode} with scale_rewards {self.scale_rewards} and "
                f"multi_objective_aggregation {self.multi_objective_aggregation} reads the whole batch (use "
                "scale_rewards group or none, an estimator other than reinforce_pp, and sum_then_normalize)"
            )
        if self.advantage_mode == "pass_at_k" and self.train_pass_k >= U:
            raise ConfigError(f"{what}: advantage_mode pass_at_k needs train_pass_k < allocation_unit={U}")

    @property
    def unit(self) -> int:
        """Completions sampled per prompt row: G, or allocation_unit when prompts get whole units of it."""
        return self.num_generations if self.sample_allocation == "fixed" else self.allocation_unit

    @property
    def entropy_bonus(self) -> bool:
        """An entropy term is in the loss (TRL: a non-zero coefficient, or adaptive control that may raise it)."""
        return self.entropy_coef != 0 or self.use_adaptive_entropy

    @property
    def loss_is_zero_without_advantage(self) -> bool:
        """A group whose advantages are all zero adds exactly nothing to the loss or its gradient: no KL, no entropy
        bonus, and no token pool (top_entropy_quantile) that its tokens would change."""
        return not self.kl_in_loss and not self.entropy_bonus and self.top_entropy_quantile == 1

    @property
    def kl_in_loss(self) -> bool:
        """The loss has a KL term (beta > 0, and the KL is not in the reward instead)."""
        return self.beta > 0 and not self.use_kl_in_reward

    @property
    def needs_old_logps(self) -> bool:
        """Old log-probs differ from the current ones only if the policy moves before the batch is used up."""
        return self.num_iterations > 1 or self.mini_batches > 1


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
    flags override both (tinygrpo/run/recipe.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    check_task_flag(argv)
    spec = flag_value(argv, "--task") or recipe_task(flag_value(argv, "--config"))
    recipes, defaults = task_defaults(spec) if spec else ([], {})
    return parse_args(GRPOConfig, argv, "Token-level GRPO on a tiny transformer.", defaults, recipes)
