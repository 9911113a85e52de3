"""GRPOConfig's options for the rollout: the model and the data, sampling, rewards and advantages, and exploration
(which prompts a step samples, and which it samples again). One dataclass per argument group of `--help`; every
field has TRL's name where TRL has the concept, and a help text that cites where it comes from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tinygrpo.algorithm.advantage_estimators import ADVANTAGE_MODES, MULTI_OBJECTIVE_AGGREGATIONS
from tinygrpo.algorithm.allocation import SAMPLE_ALLOCATIONS
from tinygrpo.algorithm.core import SCALE_REWARDS
from tinygrpo.rollout.prompt_stats import PROMPT_SAMPLERS

DEFAULT_EXPLORE_TEMPERATURES = [2.0, 3.0, 4.0]


@dataclass
class ModelAndData:
    """GRPOConfig's options: model and data."""

    _argument_group_name: ClassVar[str] = "model and data"

    task: str | None = field(
        default=None,
        metadata={
            "help": "A task: a built-in name (reverse, countdown, ...), reasoning_gym:NAME, a file of your own "
            "(path/to/my_task.py, or my_task.py:NAME) or module:NAME. Its dataset, held-out verifier, reference and "
            "GRPO recipe become the defaults; a --config recipe and flags override them."
        },
    )
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
    dataset_name: str = field(
        default="addition",
        metadata={
            "help": "Problem set: a name under data/ (addition, seed_bank) or a directory "
            "of <split>.jsonl files with at least a 'prompt' column (TRL's name)."
        },
    )
    dataset_train_split: str = field(
        default="train", metadata={"help": "Split whose prompts GRPO trains on."}
    )
    dataset_test_split: str | None = field(
        default="test",
        metadata={"help": "Held-out split for greedy accuracy (None or '' to skip evaluation)."},
    )
    allow_overlapping_splits: bool = field(
        default=False,
        metadata={
            "help": "Train and evaluate on splits that share prompts (a run stops at start-up otherwise, with the "
            "count and an example: held-out accuracy on prompts trained on measures memory, not generalisation)."
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


@dataclass
class Sampling:
    """GRPOConfig's options: sampling."""

    _argument_group_name: ClassVar[str] = "sampling"

    num_generations: int = field(default=8, metadata={"help": "G: completions sampled per prompt (>= 2)."})
    max_completion_length: int = field(default=4, metadata={"help": "Most tokens sampled per completion."})
    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature (> 0); log-probs use it too."}
    )
    top_k: int = field(default=0, metadata={"help": "Sample from the k most likely tokens only (0 = all)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]."})
    min_p: float = field(
        default=0.0,
        metadata={
            "help": "Sample only tokens whose probability is at least min_p x the most likely one's (TRL's; "
            "Nguyen et al. 2024, min-p sampling); 0 = all. As top_k and top_p, it changes what is sampled, not the "
            "log-probs the loss reads."
        },
    )
    repetition_penalty: float = field(
        default=1.0,
        metadata={
            "help": "Divide a positive logit (multiply a negative one) of every token already in the prompt or the "
            "completion by this before sampling (TRL's; Keskar et al. 2019, CTRL); 1 = off. Samples drawn with it "
            "are off the policy the loss reads, as in TRL."
        },
    )
    static_shapes: bool | None = field(
        default=None,
        metadata={
            "help": "Decode and score with static shapes (CUDA graphs need them: launch-bound decoding; PyTorch's "
            "'Accelerating PyTorch with CUDA Graphs'): batches padded to a few buckets, finished rows masked rather "
            "than removed, the uniforms drawn at once and indexed on the device, no host read per decode step; the "
            "same completions (tinygrpo/rollout/static_decode.py, tinygrpo/model/static_shapes.py). None: on for "
            "CUDA, off on the CPU (benchmarks/static_decode.py measures both)."
        },
    )
    cuda_graphs: bool = field(
        default=False,
        metadata={
            "help": "Replay the static-shape decode, scoring and update as CUDA graphs: the decode's whole loop, "
            "captured once per bucket and sampling settings, one replay a rollout; the reference's and old policy's "
            "forwards, once per model and bucket; on one process, the policy's forward and backward in the update "
            "(torch.cuda.make_graphed_callables) (tinygrpo/rollout/static_decode.py, tinygrpo/model/static_shapes.py; "
            "PyTorch's 'Accelerating PyTorch with CUDA Graphs'). Needs a CUDA device and static shapes; the same "
            "completions. Off by default: not yet measured on a GPU (benchmarks/gpu.sh measures it)."
        },
    )
    mask_truncated_completions: bool = field(
        default=False,
        metadata={"help": "Leave completions that hit max_completion_length out of the loss (DAPO)."},
    )
    environment: str | None = field(
        default=None,
        metadata={
            "help": "Tools the policy calls inside its completions: an environment of tinygrpo/rollout/environments/ "
            "(calculator, calculator_one_digit) or module:NAME. A call written as the environment's syntax "
            "(the calculator's <12*7=) is answered by feeding the row the tool's reply (84>) before it samples "
            "again; those tokens are read by the model but left out of the loss, the KL and the entropy "
            "(TRL's tools and tool_mask; the masking of environment tokens in agent RL, e.g. Search-R1, Jin et "
            "al. 2025, arXiv 2503.09516). None: no tools."
        },
    )
    max_tool_calling_iterations: int | None = field(
        default=None,
        metadata={
            "help": "Most tool calls answered per completion (TRL's name); later calls are not answered. None: "
            "the environment's own cap."
        },
    )


@dataclass
class RewardsAndAdvantages:
    """GRPOConfig's options: rewards and advantages."""

    _argument_group_name: ClassVar[str] = "rewards and advantages"

    eval_reward: str | None = field(
        default=None,
        metadata={
            "help": "The reward that decides held-out accuracy (right when it scores exactly 1.0): a registered name, "
            "module:function or file.py:function. Default: the task's verifier, or `accuracy` (the strict integer "
            "rule) for a dataset no task names. Every gold answer is checked to score 1.0 under it at start-up."
        },
    )
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
    advantage_mode: str = field(
        default="grpo",
        metadata={
            "help": f"Baseline: {', '.join(ADVANTAGE_MODES)}. grpo: group mean (and std, see scale_rewards; "
            "Shao et al. 2024); rloo: leave-one-out mean (Ahmadian et al. 2024); reinforce: raw reward; opo: the "
            "length-weighted group mean (Hao et al. 2025); pass_at_k: the pass@k objective's advantages for 0/1 "
            "rewards, k = train_pass_k (Chen et al. 2025); reinforce_pp: the reward whitened over the batch's "
            "tokens, reinforce_pp_baseline: the group mean subtracted first (REINFORCE++, Hu et al. 2025); remax: "
            "the reward of the prompt's greedy answer (one extra greedy decode per prompt; ReMax, Li et al. "
            "2023). tinygrpo/algorithm/advantage_estimators.py has the formulas."
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


@dataclass
class Exploration:
    """GRPOConfig's options: exploration: which prompts, and sampling them again."""

    _argument_group_name: ClassVar[str] = "exploration: which prompts, and sampling them again"

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
    sample_allocation: str = field(
        default="fixed",
        metadata={
            "help": f"How many samples each prompt of a round gets: {', '.join(SAMPLE_ALLOCATIONS)}. fixed: G each "
            "(GRPO); knapsack: the round's P x G samples split prompt by prompt, in units of allocation_unit, to "
            "maximise the summed (1 - p^n - (1-p)^n) p (1-p)^2 of n samples at each prompt's pass-rate estimate p "
            "(Knapsack RL, Li et al. 2025, arXiv 2509.25849), at least one unit and at most max_num_generations each; "
            "screen: allocation_unit samples of every prompt first, the rest of a group of G only where they differ or "
            "the prompt is known to be hard (SPEED, Zhang et al. 2025, arXiv 2506.09016); until_signal: "
            "allocation_unit samples of every prompt, then one more unit at a time of each prompt whose rewards are "
            "all alike, until they differ, it has max_num_generations or the round has spent P x G samples "
            "(Reinforce-Ada, Xiong et al. 2025, arXiv 2510.04996)."
        },
    )
    allocation_unit: int = field(
        default=4,
        metadata={
            "help": "Samples per unit of sample_allocation (not fixed): a prompt gets whole units; the grouped fast "
            "path encodes a prompt once per unit. Divides num_generations."
        },
    )
    screen_hard_below: float = field(
        default=0.5,
        metadata={
            "help": "sample_allocation screen: a prompt whose screen unit is all alike still gets a whole group "
            "when its pass-rate estimate is in (0, this): solved before, but rarely (SPEED, Zhang et al. 2025, "
            "arXiv 2506.09016, continues only mixed screens; 0 = the same)."
        },
    )
    max_num_generations: int = field(
        default=32,
        metadata={
            "help": "Most samples one prompt gets in a round under sample_allocation knapsack or until_signal."
        },
    )
    prompt_sampler: str = field(
        default="unsolved",
        metadata={
            "help": f"How each step's prompts are drawn: {', '.join(PROMPT_SAMPLERS)}. uniform: a fresh permutation "
            "per pass; unsolved: weight 1 - p (a curriculum that revisits failed prompts); informative: weight "
            "p (1 - p), the variance of a 0/1 reward (Knapsack-RL, Li et al. 2025; online difficulty filtering, "
            "Bae et al. 2025). p: the prompt's pass-rate estimate (pass_rate_ema)."
        },
    )
    shuffle_dataset: bool = field(
        default=True,
        metadata={
            "help": "Draw the training prompts in a seeded random order (TRL's); false: in the dataset's order, "
            "each pass alike (prompt_sampler uniform only: the other samplers choose by pass rate)."
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
