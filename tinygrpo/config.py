"""GRPOConfig: every knob of a run, with TRL's names and meanings where TRL has the concept.

Parsed as TRL's `TrlParser` does: `--config recipe.yaml` sets the parser's defaults and command-line flags override
them. Every field has a help text (`python train_grpo.py --help`); `__post_init__` rejects bad values with a message
that names the field and the allowed values: single-field bounds and choices from the tables BOUNDS and CHOICES,
rules that tie fields together one by one below them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import torch
from accelerate.utils import is_tensorboard_available

from .advantage_estimators import (
    ADV_ESTIMATORS,
    ADVANTAGE_MODES,
    MULTI_OBJECTIVE_AGGREGATIONS,
    needs_binary_rewards,
)
from .checks import (
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
from .core import IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, SCALE_REWARDS
from .policy_losses import LOSS_TYPES, POLICY_LOSSES, ppo_clip_loss
from .prompt_stats import PROMPT_SAMPLERS
from .recipe import parse_args

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
    # counts of tokens, steps and passes, and intervals between events (an interval of 0 would never fire)
    **each(AT_LEAST_1, "max_completion_length max_steps num_iterations logging_steps eval_steps"),
    # counts where 0 means "none" or "off" (save_steps 0: only at the end; top_k 0: every token; threads 0: auto)
    **each(NON_NEGATIVE, "save_steps warmup_steps eval_pass_k top_k num_completions_to_log"),
    **each(NON_NEGATIVE, "torch_num_threads max_dynamic_sampling_rounds"),
    "save_total_limit": AT_LEAST_1,  # the newest checkpoint is always kept
    "temperature": POSITIVE,  # log-probs divide by it (0 would be greedy)
    "top_p": Bound(0, 1, lo_open=True),  # a probability mass; 0 keeps no token
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
    **each(Bound(0, 1, hi_open=True), "adam_beta1 adam_beta2"),  # EMA decays: 1 would never update
    "max_grad_norm": NON_NEGATIVE,  # 0 = no clip
    "ref_model_mixup_alpha": PROBABILITY,  # a convex combination's weight
    "ref_model_sync_steps": AT_LEAST_1,
    "prompt_sampler_floor": POSITIVE,  # so that every prompt keeps a chance to be drawn
    "pass_rate_ema": Bound(0, 1, lo_open=True),  # an EMA's weight: 0 would never learn a pass rate
    "explore_rounds": NON_NEGATIVE,
    # temperatures of the explore rounds (log-probs divide by them); the list must not be empty
    "explore_temperatures": Bound(0, lo_open=True, words="positive numbers"),
    "explore_importance_sampling_clip_max": POSITIVE,  # a cap on weights that are > 0
}

# epsilon's range under PPO's clip (a rule below: other loss types read epsilon otherwise).
PPO_EPSILON = Bound(0, 1, lo_open=True, hi_open=True)
# The most generation rounds one step may run: the first, the explore rounds and the refills (see __post_init__).
MAX_ROUNDS_PER_STEP = 32
DEFAULT_EXPLORE_TEMPERATURES = [2.0, 3.0, 4.0]

# Fields that name one of a fixed set of things: "{name}={value!r} is not one of {', '.join(allowed)}".
# The registries' live names: a loss or estimator registered after this module is loaded is a valid choice too.
CHOICES: dict[str, Collection[str]] = {
    "prompt_sampler": PROMPT_SAMPLERS,
    "loss_type": POLICY_LOSSES.keys(),
    "kl_estimator": KL_ESTIMATORS,
    "advantage_mode": ADV_ESTIMATORS.keys(),
    "multi_objective_aggregation": MULTI_OBJECTIVE_AGGREGATIONS,
    "scale_rewards": SCALE_REWARDS,
    "importance_sampling_level": IMPORTANCE_SAMPLING_LEVELS,
    "lr_scheduler_type": ("constant", "linear", "cosine"),
    "report_to": ("none", "tensorboard"),
    "on_nonfinite": ("stop", "skip"),
    "dtype": ("float32", "float64"),
}


@dataclass
class GRPOConfig:
    # ----- model and data -----
    model_name_or_path: str = field(
        default="checkpoints/reference",
        metadata={
            "help": "Directory of the initial policy (save_pretrained format). The default experiment trains "
            "it first (python train_sft.py) when it is missing."
        },
    )
    ref_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Reference policy for the KL term; default: the same as model_name_or_path."},
    )
    dataset: str = field(
        default="addition",
        metadata={
            "help": "Problem set: a name under data/ (addition, seed_bank) or a directory "
            "of <split>.jsonl files with at least a 'prompt' column."
        },
    )
    train_split: str = field(default="train", metadata={"help": "Split whose prompts GRPO trains on."})
    eval_split: str | None = field(
        default="test",
        metadata={"help": "Held-out split for greedy accuracy (None or '' to skip evaluation)."},
    )
    # ----- batch shape (TRL counts completions) -----
    num_generations: int = field(default=8, metadata={"help": "G: completions sampled per prompt (>= 2)."})
    per_device_train_batch_size: int = field(
        default=512,
        metadata={
            "help": "Completions per process per step (as in TRL): a multiple of num_generations, so that "
            "every process holds whole groups. Prompts per step = this / G * num_processes."
        },
    )
    num_mini_batches: int = field(
        default=1, metadata={"help": "Optimizer steps per pass over a generated batch (whole groups each)."}
    )
    steps_per_generation: int | None = field(
        default=None,
        metadata={
            "help": "As in TRL: each generation samples per_device_train_batch_size x steps_per_generation "
            "completions per process, which feed that many optimizer steps of per_device_train_batch_size each, so "
            "the policy moves within a generated batch (off-policy reuse: the ratio and the clip act). The same as "
            "num_mini_batches on a batch that many times larger (use one or the other). max_steps counts "
            "generations here (TRL counts optimizer steps). None: 1."
        },
    )
    # ----- generation -----
    max_completion_length: int = field(default=4, metadata={"help": "Most tokens sampled per completion."})
    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature (> 0); log-probs use it too."}
    )
    top_k: int = field(default=0, metadata={"help": "Sample from the k most likely tokens only (0 = all)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]."})
    mask_truncated_completions: bool = field(
        default=False,
        metadata={"help": "Leave completions that hit max_completion_length out of the loss (DAPO)."},
    )
    # ----- rewards -----
    reward_funcs: list[str] = field(
        default_factory=lambda: ["accuracy"],
        metadata={
            "help": "Reward functions: registered names (python -m rewards list), package.module:function, "
            "or path/to/file.py:function."
        },
    )
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per reward function (default: all 1.0)."}
    )
    # ----- advantages -----
    advantage_mode: str = field(
        default="grpo",
        metadata={
            "help": f"Baseline: {', '.join(ADVANTAGE_MODES)}. grpo: group mean (and std, see scale_rewards; "
            "Shao et al. 2024); rloo: leave-one-out mean (Ahmadian et al. 2024); reinforce: raw reward; opo: the "
            "length-weighted group mean (Hao et al. 2025); pass_at_k: the pass@k objective's advantages for 0/1 "
            "rewards, k = train_pass_k (Chen et al. 2025); reinforce_pp: the reward whitened over the batch's "
            "tokens, reinforce_pp_baseline: the group mean subtracted first (REINFORCE++, Hu et al. 2025); remax: "
            "the reward of the prompt's greedy answer (one extra greedy decode per prompt; ReMax, Li et al. "
            "2023). tinygrpo/advantage_estimators.py has the formulas."
        },
    )
    train_pass_k: int = field(
        default=4,
        metadata={"help": "k of advantage_mode pass_at_k, 1 <= k < num_generations (Chen et al. 2025)."},
    )
    multi_objective_aggregation: str = field(
        default="sum_then_normalize",
        metadata={
            "help": f"{', '.join(MULTI_OBJECTIVE_AGGREGATIONS)} (as TRL). sum_then_normalize: the weighted sum of the "
            "rewards, then advantage_mode; normalize_then_sum: each reward z-scored in its group, then the weighted "
            "sum, z-scored over the batch (GDPO, Liu et al. 2026; advantage_mode and scale_rewards unused)."
        },
    )
    scale_rewards: str = field(
        default="group",
        metadata={
            "help": f"For advantage_mode grpo: {', '.join(SCALE_REWARDS)} (none = Dr. GRPO, Liu et al. 2025)."
        },
    )
    dynamic_sampling: bool = field(
        default=True,
        metadata={
            "help": "DAPO (Yu et al. 2025): drop zero-variance groups and refill the batch with fresh prompts, "
            "at most max_dynamic_sampling_rounds extra rounds per step."
        },
    )
    max_dynamic_sampling_rounds: int = field(
        default=3, metadata={"help": "Bound on dynamic sampling refills (extra generation rounds per step)."}
    )
    # ----- exploration: where samples are spent (per-prompt pass rates, tinygrpo/prompt_stats.py) -----
    prompt_sampler: str = field(
        default="unsolved",
        metadata={
            "help": f"How each step's prompts are drawn: {', '.join(PROMPT_SAMPLERS)}. uniform: a fresh permutation "
            "per pass; unsolved: weight 1 - p (a curriculum that revisits failed prompts); informative: weight "
            "p (1 - p), the variance of a 0/1 reward (Knapsack-RL, Li et al. 2025; online difficulty filtering, "
            "Bae et al. 2025). p: the prompt's pass-rate estimate (pass_rate_ema)."
        },
    )
    prompt_sampler_floor: float = field(
        default=0.05, metadata={"help": "Added to every prompt's selection weight, so that none is left out."}
    )
    pass_rate_ema: float = field(
        default=0.5,
        metadata={
            "help": "Weight of a prompt's newest group in its pass-rate estimate (an EMA of group means)."
        },
    )
    explore_rounds: int = field(
        default=3,
        metadata={
            "help": "Adaptive resampling of failed prompts (Reinforce-Ada, Xiong et al. 2025): a prompt whose G "
            "samples all scored below the batch's best is sampled again, G at a time, at the next of "
            "explore_temperatures, for at most this many rounds, until its group has signal (0 = off)."
        },
    )
    explore_temperatures: list[float] = field(
        default_factory=lambda: list(DEFAULT_EXPLORE_TEMPERATURES),
        metadata={
            "help": "Sampling temperature of each explore round (the last repeats). Higher temperatures find the "
            "answers a confident policy misses; the loss reweights those samples to the policy's temperature "
            "with truncated importance weights (explore_importance_sampling_clip_max)."
        },
    )
    explore_importance_sampling_correction: bool = field(
        default=False,
        metadata={
            "help": "Reweight the tokens of explore samples to the policy's temperature (explore_importance_sampling_"
            "clip_max). False trains on them as if sampled at the run's temperature: biased, but a rare right "
            "answer found hot keeps its full push (with the correction its weight is pi_T(y) / pi_T'(y), tiny)."
        },
    )
    explore_importance_sampling_clip_max: float = field(
        default=3.0,
        metadata={
            "help": "Cap C of the token-level truncated importance weight min(pi(y_t) / pi_T'(y_t), C) of a token "
            "sampled at an explore temperature T' (TIS, Yao et al. 2025; TRL's vllm_importance_sampling_clip_max)."
        },
    )
    grouped_forward: bool = field(
        default=True,
        metadata={
            "help": "Use the model's grouped fast path when it has one (tiny_lm does): each prompt encoded once for "
            "its G completions, finished rows dropped from decoding, tokens after EOS never computed. Exact (tests "
            "compare it with the generic transformers forward); False forces the generic forward. Not used under "
            "FSDP, which shards the parameters the fast path reads."
        },
    )
    bf16: bool = field(
        default=False,
        metadata={
            "help": "Run the forwards (sampling, reference, policy) under torch.autocast in bfloat16, as TRL's bf16 "
            "(mixed precision: weights, gradients and AdamW stay float32; log-probs are taken in float32). "
            "BFLOAT16 training: Kalamkar et al. 2019. For GPUs; on a CPU it is slower at these sizes."
        },
    )
    dtype: str = field(
        default="float32",
        metadata={
            "help": "The policy's and the reference's weights, and so every forward, backward and AdamW step: "
            "float32 or float64 (TRL's ModelConfig.dtype; bf16 above is the mixed-precision one). float64 is for "
            "checking the math: two computation orders of the same sums (the grouped and the generic forward, one "
            "process and two) agree to ~1e-12 in it, where float32's last bits differ from one CPU's kernels to "
            "another's (Goldberg 1991, What Every Computer Scientist Should Know About Floating-Point Arithmetic). "
            "Sampling and rewards are float32 either way."
        },
    )
    skip_zero_advantage_groups: bool = field(
        default=True,
        metadata={
            "help": "Leave groups whose advantages are all zero out of the forward/backward when the loss has no KL "
            "(beta 0) and no entropy term (entropy_coef, top_entropy_quantile). "
            "Exact: their loss terms are zero; the normalisers still count them."
        },
    )
    # ----- loss -----
    loss_type: str = field(
        default="dapo",
        metadata={
            "help": f"{', '.join(LOSS_TYPES)}, as in TRL (gmpo as in verl). The first four are PPO's clipped "
            "surrogate, reduced differently: grpo a per-sequence token mean (Shao et al. 2024), bnpo the local "
            "batch's token mean, dr_grpo a constant (B * max_completion_length; Liu et al. 2025), dapo the global "
            "batch's token mean (Yu et al. 2025). cispo: truncated, detached importance weights times the "
            "REINFORCE term (MiniMax-M1, 2025; epsilon_high is the cap, ScaleRL recommends 5); sapo: a smooth "
            "sigmoid gate instead of the clip (Gao et al. 2025); luspo: per-sequence token SUM, for "
            "importance_sampling_level sequence (LUSPO, 2026); vespo: a Gamma weight of the sequence ratio "
            "(VESPO, 2026); gmpo: the geometric mean of the clipped token ratios, epsilon/epsilon_high bound "
            "the log ratio (Zhao et al. 2025). tinygrpo/policy_losses.py has the formulas."
        },
    )
    sapo_temperature_pos: float = field(
        default=1.0,
        metadata={"help": "sapo's gate temperature for tokens with a positive advantage (Gao et al. 2025)."},
    )
    sapo_temperature_neg: float = field(
        default=1.05,
        metadata={
            "help": "sapo's gate temperature for the other tokens (Gao et al. 2025): higher decays faster."
        },
    )
    vespo_k_pos: float = field(
        default=2.0,
        metadata={"help": "vespo's Gamma power k for A >= 0: down-weights sequences with w < 1 (VESPO)."},
    )
    vespo_lambda_pos: float = field(
        default=3.0, metadata={"help": "vespo's Gamma decay lambda for A >= 0: down-weights w > 1 (VESPO)."}
    )
    vespo_k_neg: float = field(default=3.0, metadata={"help": "vespo's Gamma power k for A < 0 (VESPO)."})
    vespo_lambda_neg: float = field(
        default=2.0, metadata={"help": "vespo's Gamma decay lambda for A < 0 (VESPO)."}
    )
    off_policy_mask_threshold: float | None = field(
        default=None,
        metadata={
            "help": "Leave out of the loss every completion with a negative advantage whose mean per-token KL "
            "log pi_old - log pi exceeds this (DeepSeek-V3.2, 2025, eq. 9; e.g. 0.5). Acts only off-policy "
            "(num_iterations > 1 or num_mini_batches > 1). None: off."
        },
    )
    top_entropy_quantile: float = field(
        default=1.0,
        metadata={
            "help": "rho: train only on the top-rho quantile of completion tokens by entropy, over the mini-batch "
            "of every process (Wang et al. 2025, Beyond the 80/20 Rule, recommend 0.2). 1.0 keeps every token; "
            "0.0 keeps only the highest-entropy ones. With a row-level loss (gmpo, a sequence-level ratio) the mask "
            "scales each row's loss by its share of kept tokens rather than selecting tokens (as in TRL)."
        },
    )
    entropy_coef: float = field(
        default=0.0,
        metadata={
            "help": "Entropy bonus: loss - entropy_coef * mean per-token entropy over the tokens the policy loss "
            "acts on, whatever the loss_type (as TRL). With use_adaptive_entropy, the initial coefficient."
        },
    )
    use_adaptive_entropy: bool = field(
        default=False,
        metadata={
            "help": "Adaptive entropy control (Skywork-OR1, He et al. 2025): after each optimizer step the "
            "coefficient moves up by entropy_coef_delta when the mean entropy is at or below entropy_target, "
            "down otherwise (within [entropy_coef_min, entropy_coef_max]); the bonus applies only while the "
            "entropy is at or below the target."
        },
    )
    entropy_coef_min: float = field(default=0.0, metadata={"help": "Adaptive entropy control's lower bound."})
    entropy_coef_max: float = field(default=1.0, metadata={"help": "Adaptive entropy control's upper bound."})
    entropy_coef_delta: float = field(default=0.005, metadata={"help": "Adaptive entropy control's step."})
    entropy_target: float = field(
        default=0.2, metadata={"help": "Adaptive entropy control's target mean per-token entropy (nats)."}
    )
    beta: float = field(
        default=0.0, metadata={"help": "KL coefficient to the reference (0 = no reference built)."}
    )
    use_bias_correction_kl: bool = field(
        default=True,
        metadata={
            "help": "Multiply the per-token KL by the (differentiable) importance ratio, so that its gradient is the "
            "unbiased gradient of the reverse KL (DeepSeek-V3.2, 2025; TRL's default). It changes the gradient even "
            "on-policy, where the ratio's value is exactly 1. Only with beta > 0 and a sampled kl_estimator (k1, k2, "
            "k3): the exact per-position KL (full) does not depend on the token sampled there."
        },
    )
    use_kl_in_reward: bool = field(
        default=False,
        metadata={
            "help": "Put the KL in the reward instead of the loss (PPO for RLHF, Ouyang et al. 2022; verl's "
            "use_kl_in_reward, OpenRLHF): each completion's reward loses beta x the sum over its tokens of k1 = "
            "log pi(y_t) - log pi_ref(y_t) (the sampling policy's), before advantages; the loss then has no KL "
            "term. Needs beta > 0; costs a policy and a reference forward per generation round."
        },
    )
    kl_estimator: str = field(
        default="k3",
        metadata={
            "help": f"Per-token KL: {', '.join(KL_ESTIMATORS)}. k3 is DeepSeekMath's; full is the exact KL "
            "over the vocabulary at each position."
        },
    )
    epsilon: float = field(default=0.2, metadata={"help": "Lower clip: ratio >= 1 - epsilon."})
    epsilon_high: float | None = field(
        default=None,
        metadata={"help": "Upper clip: ratio <= 1 + epsilon_high (DAPO clip-higher); None = epsilon."},
    )
    delta: float | None = field(
        default=None,
        metadata={"help": "Two-sided GRPO: clamp the unclipped ratio at delta (> 1 + epsilon_high)."},
    )
    importance_sampling_level: str = field(
        default="token",
        metadata={"help": "token, or sequence (GSPO, Zheng et al. 2025: length-normalised ratio)."},
    )
    num_iterations: int = field(
        default=1,
        metadata={
            "help": "mu: optimisation passes per generated batch. With 1 (and one mini-batch) the ratio is "
            "exactly 1 and the gradient is the plain policy gradient; the clip never acts."
        },
    )
    # ----- optimisation -----
    learning_rate: float = field(default=2e-3, metadata={"help": "AdamW learning rate."})
    lr_scheduler_type: str = field(
        default="cosine", metadata={"help": "cosine (to 0 at max_steps), linear or constant."}
    )
    warmup_steps: int = field(default=0, metadata={"help": "Linear warm-up steps."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.99, metadata={"help": "AdamW beta2."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient-norm clip (0 = off)."})
    max_steps: int = field(
        default=1000,
        metadata={"help": "Training steps (each: one generated batch, refilled under dynamic_sampling)."},
    )
    # ----- reference sync (TR-DPO style, as in TRL) -----
    sync_ref_model: bool = field(default=False, metadata={"help": "Move the reference towards the policy."})
    ref_model_mixup_alpha: float = field(
        default=0.6, metadata={"help": "ref = alpha * policy + (1 - alpha) * ref at each sync."}
    )
    ref_model_sync_steps: int = field(default=512, metadata={"help": "Steps between reference syncs."})
    # ----- evaluation, logging, checkpoints -----
    seed: int = field(default=42, metadata={"help": "Seed for data order, sampling and everything else."})
    output_dir: str = field(
        default="runs/default", metadata={"help": "Where metrics, checkpoints, plots go."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Allow replacing an output_dir that already holds another run."}
    )
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata={"help": "A checkpoint directory, or 'latest' (the newest complete one in output_dir)."},
    )
    logging_steps: int = field(
        default=10, metadata={"help": "Write metrics.jsonl and sample completions every N."}
    )
    eval_steps: int = field(
        default=50, metadata={"help": "Held-out evaluation every N steps (and at 0 and the end)."}
    )
    eval_pass_k: int = field(
        default=0, metadata={"help": "Also report pass@k with k samples per prompt (0 = off)."}
    )
    save_steps: int = field(default=100, metadata={"help": "Checkpoint every N steps (0 = only at the end)."})
    save_total_limit: int = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    num_completions_to_log: int = field(
        default=16,
        metadata={
            "help": "Completions written per logging step (completions.jsonl; whole groups of the first round, "
            "those with signal first: the report draws them token by token)."
        },
    )
    report_to: str = field(default="none", metadata={"help": "none or tensorboard (through accelerate)."})
    on_nonfinite: str = field(
        default="stop",
        metadata={"help": "A NaN/inf loss or gradient: stop (keep the last checkpoint) or skip."},
    )
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bar."})
    make_plots: bool = field(default=True, metadata={"help": "Write plots.png at the end."})
    make_report: bool = field(
        default=True,
        metadata={
            "help": "Write report.html at the end (and when stopped): one self-contained page of the run "
            "(python -m tinygrpo.report RUN_DIR builds it for any run)."
        },
    )
    torch_num_threads: int = field(
        default=0, metadata={"help": "torch threads per process (0 = cores / processes)."}
    )

    def __post_init__(self) -> None:
        check_fields(self, BOUNDS, CHOICES)
        check_threads("torch_num_threads", self.torch_num_threads)
        # Each explore round's rows carry their temperature as a float32 tensor (Batch.temperature).
        too_hot = [t for t in self.explore_temperatures if t > torch.finfo(torch.float32).max]
        if too_hot:
            raise ConfigError(
                f"explore_temperatures holds {too_hot[0]}, beyond float32's range (at most 3.4e+38): give temperatures "
                "a float32 can hold"
            )
        # accelerate would warn and train on without the tracker the user asked for.
        if self.report_to == "tensorboard" and not is_tensorboard_available():
            raise ConfigError("report_to=tensorboard needs the tensorboard package (pip install tensorboard)")
        # Rules that tie fields together (each field is in range by now).
        if self.bf16 and self.dtype != "float32":
            raise ConfigError(
                f"bf16 autocasts float32 weights to bfloat16; dtype={self.dtype} asks for {self.dtype} weights: "
                "set one of them"
            )
        # Advantages are computed within a group, so a process must hold whole groups.
        if self.per_device_train_batch_size < 1 or self.per_device_train_batch_size % self.num_generations:
            raise ConfigError(
                f"per_device_train_batch_size={self.per_device_train_batch_size} is not a positive multiple of "
                f"num_generations={self.num_generations}: each process must hold whole groups"
            )
        # Both split one generated batch into optimizer steps: two splits at once would be ambiguous.
        if (self.steps_per_generation or 1) > 1 and self.num_mini_batches > 1:
            raise ConfigError(
                f"steps_per_generation={self.steps_per_generation} and num_mini_batches={self.num_mini_batches} "
                "both split the generated batch: set one of them"
            )
        # A mini-batch holds whole groups too (its loss normalisers count whole groups).
        groups = self.per_device_train_batch_size // self.num_generations
        if self.num_mini_batches < 1 or groups % self.num_mini_batches:
            raise ConfigError(
                f"num_mini_batches={self.num_mini_batches} must divide the {groups} groups per process"
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
        # pass@k over G samples: k = G leaves every advantage 0 (only checked when the mode uses k).
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
        # A command line cannot pass None: "" or the word None means "no evaluation split".
        if self.eval_split in ("", "None", "none", "null"):
            self.eval_split = None
        # The KL in the reward and the reference's sync both need a reference, which beta == 0 does not build.
        if self.use_kl_in_reward and self.beta == 0:
            raise ConfigError("use_kl_in_reward needs beta > 0 (the KL's coefficient in the reward)")
        if self.sync_ref_model and self.beta == 0:
            raise ConfigError("sync_ref_model needs beta > 0 (with beta == 0 there is no reference)")

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
    def generation_size(self) -> int:
        """Completions each process samples per generation (before dynamic sampling's refills)."""
        return self.per_device_train_batch_size * (self.steps_per_generation or 1)

    @property
    def mini_batches(self) -> int:
        """Optimizer steps per pass over a generated batch (num_mini_batches or steps_per_generation)."""
        return self.num_mini_batches * (self.steps_per_generation or 1)

    @property
    def kl_in_loss(self) -> bool:
        """The loss has a KL term (beta > 0, and the KL is not in the reward instead)."""
        return self.beta > 0 and not self.use_kl_in_reward

    @property
    def needs_old_logps(self) -> bool:
        """Old log-probs differ from the current ones only if the policy moves before the batch is used up."""
        return self.num_iterations > 1 or self.mini_batches > 1


def parse_config(argv: list[str] | None = None) -> GRPOConfig:
    """`--config file.yaml` (optional, anywhere in argv) sets the defaults; flags override them (tinygrpo/recipe.py)."""
    return parse_args(GRPOConfig, argv, "Token-level GRPO on a tiny transformer.")
