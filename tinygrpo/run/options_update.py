"""GRPOConfig's options for the update: the loss, the KL and entropy terms, the optimizer and its schedule, and
logging and saving. One dataclass per argument group of `--help`; every field has TRL's name where TRL has the
concept, and a help text that cites where it comes from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tinygrpo.algorithm.core import KL_ESTIMATORS
from tinygrpo.algorithm.policy_losses import LOSS_TYPES


@dataclass
class Loss:
    """GRPOConfig's options: loss."""

    _argument_group_name: ClassVar[str] = "loss"

    skip_zero_advantage_groups: bool = field(
        default=True,
        metadata={
            "help": "Leave groups whose advantages are all zero out of the forward/backward when the loss has no KL "
            "(beta 0) and no entropy term (entropy_coef, top_entropy_quantile). "
            "Exact: their loss terms are zero; the normalisers still count them."
        },
    )
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
            "the log ratio (Zhao et al. 2025). tinygrpo/algorithm/policy_losses.py has the formulas."
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


@dataclass
class KLAndEntropy:
    """GRPOConfig's options: KL and entropy."""

    _argument_group_name: ClassVar[str] = "KL and entropy"

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
    sync_ref_model: bool = field(default=False, metadata={"help": "Move the reference towards the policy."})
    ref_model_mixup_alpha: float = field(
        default=0.6, metadata={"help": "ref = alpha * policy + (1 - alpha) * ref at each sync."}
    )
    ref_model_sync_steps: int = field(default=512, metadata={"help": "Steps between reference syncs."})


@dataclass
class Optimizer:
    """GRPOConfig's options: optimizer and schedule."""

    _argument_group_name: ClassVar[str] = "optimizer and schedule"

    learning_rate: float = field(default=2e-3, metadata={"help": "AdamW learning rate."})
    lr_scheduler_type: str = field(
        default="cosine", metadata={"help": "cosine (to 0 at max_steps), linear or constant."}
    )
    warmup_steps: float = field(
        default=0,
        metadata={
            "help": "Linear warm-up steps; a value in (0, 1) is a share of max_steps, rounded up (transformers 5's "
            "reading, where warmup_ratio is gone)."
        },
    )
    warmup_ratio: float = field(
        default=0.0,
        metadata={
            "help": "Warm-up as a share of max_steps, rounded up, when warmup_steps is 0 (TRL's name)."
        },
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.99, metadata={"help": "AdamW beta2."})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "AdamW epsilon (TRL's name)."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient-norm clip (0 = off)."})


@dataclass
class LoggingAndSaving:
    """GRPOConfig's options: logging and saving."""

    _argument_group_name: ClassVar[str] = "logging and saving"

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
    num_generations_eval: int | None = field(
        default=None,
        metadata={
            "help": "Completions sampled per held-out prompt (TRL's): the evaluation also reports their mean "
            "accuracy (eval/sampled_accuracy) and pass@n, beside the greedy accuracy (eval_pass_k = n)."
        },
    )
    eval_pass_k: int = field(
        default=0, metadata={"help": "Also report pass@k with k samples per prompt (0 = off)."}
    )
    logging_first_step: bool = field(
        default=False, metadata={"help": "Also log the first optimizer step's row (TRL's)."}
    )
    save_steps: int = field(default=100, metadata={"help": "Checkpoint every N steps (0 = only at the end)."})
    save_total_limit: int = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    log_completions: bool = field(
        default=True,
        metadata={
            "help": "Log a sample of each logging step's completions to completions.jsonl (TRL's log_completions; "
            "on by default here: the report draws them token by token)."
        },
    )
    num_completions_to_print: int = field(
        default=16,
        metadata={
            "help": "Completions logged per logging step: whole groups of the first round, those with signal first "
            "(TRL's name)."
        },
    )
    report_to: str = field(
        default="none",
        metadata={
            "help": "Trackers that get every logged row, through accelerate (TRL's report_to): none, all (every one "
            "installed), or tensorboard, wandb, trackio, mlflow, comet_ml, aim, clearml, dvclive, swanlab, joined by "
            "commas."
        },
    )
    run_name: str | None = field(
        default=None,
        metadata={"help": "The run's name for the trackers (TRL's run_name; default: output_dir's)."},
    )
    metric_for_best_model: str | None = field(
        default=None,
        metadata={
            "help": "The held-out metric that ranks evaluations for callbacks (transformers' name: `accuracy` is "
            "eval/accuracy), as EarlyStoppingCallback reads it."
        },
    )
    greater_is_better: bool | None = field(
        default=None, metadata={"help": "Whether a larger metric_for_best_model is better (default: yes)."}
    )
    disable_tqdm: bool = field(default=False, metadata={"help": "No progress bar."})
    make_plots: bool = field(
        default=True,
        metadata={
            "help": "Draw the figures at the end: plots.png and the report's (false: the report says where each "
            "would be; `python -m tinygrpo.run.report RUN_DIR` draws them later from the logs)."
        },
    )
    make_report: bool = field(
        default=True,
        metadata={
            "help": "Write report.html at the end (and when stopped): one self-contained page of the run "
            "(python -m tinygrpo.run.report RUN_DIR builds it for any run)."
        },
    )
