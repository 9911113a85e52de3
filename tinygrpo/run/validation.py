"""Checks of a GRPO run's inputs (data, tokenizer, model, rewards, sizes) that fail fast with one line naming the
problem, before any training: the data's against the verifier and the rewards (tinygrpo/data/checks.py), the sizes'
memory against the budget (tinygrpo/model/memory.py). Each check is handed the option groups it reads."""

from __future__ import annotations

import torch
import torch.nn as nn

from tinygrpo.algorithm.advantage_estimators import AdvantageConfig
from tinygrpo.base.options import ConfigError
from tinygrpo.data.checks import check_eos_read, check_held_out, probe
from tinygrpo.data.verifier import Verifier
from tinygrpo.model.memory import ModelShape, gigabytes, memory_budget
from tinygrpo.model.static_shapes import bucket_size
from tinygrpo.rollout.config import RolloutConfig, SamplingParams
from tinygrpo.rollout.environment import get_environment
from tinygrpo.rollout.scoring import RewardSpec
from tinygrpo.run.config import ModelConfig
from tinygrpo.update.config import BatchConfig


def check_inputs(
    m: ModelConfig,
    batches: BatchConfig,
    sampling: SamplingParams,
    rollout: RolloutConfig,
    advantages: AdvantageConfig,
    eval_pass_k: int,
    model: nn.Module,
    tokenizer,
    train_dataset,
    eval_dataset,
    rewards: RewardSpec,
    device: torch.device | None = None,
) -> None:
    """Bad input -> ConfigError naming the problem, before any training. `device`: the run's (None: not checked)."""
    check_graphs(m)
    check_data(
        m, rollout.environment, sampling.max_completion_length, model, tokenizer, train_dataset, eval_dataset
    )
    if m.cuda_graphs and device is not None and device.type != "cuda":  # (after the data's checks, as before)
        raise ConfigError(f"cuda_graphs needs a CUDA device; this run is on {device.type}")
    scored = eval_dataset is not None and "answer" in eval_dataset.column_names  # (no answers: no evaluation)
    eval_prompts = len(eval_dataset) if scored else 0
    check_memory(
        batches, sampling.max_completion_length, eval_pass_k, ModelShape.of(model.config), eval_prompts
    )
    # Every reward function on every row of the train split, and the verifier on every row of the eval split, with
    # the gold answer as the completion: a missing column, a bad signature or an answer the verifier cannot parse
    # fails here, naming the row, not at the first rollout or evaluation.
    binary = f"advantage_mode {advantages.advantage_mode}" if advantages.binary_rewards else None
    where = f"{m.dataset_name}/{m.dataset_train_split}"
    best = probe(rewards.funcs, rewards.names, train_dataset, where, rewards.kwargs, rewards.weights, binary)
    check_eos_read(best, rewards.funcs, rewards.names, rewards.weights, train_dataset, where, rewards.kwargs)
    verifier = Verifier.of(
        m.dataset_name, m.eval_reward, m.task, rewards.kwargs["eos"]
    )  # held-out accuracy's rule
    splits = (m.dataset_name, m.dataset_train_split, m.dataset_test_split)
    check_held_out(
        verifier,
        train_dataset,
        eval_dataset if scored else None,
        splits,
        m.allow_overlapping_splits,
        rewards.kwargs,
    )


def check_graphs(m: ModelConfig) -> None:
    """cuda_graphs captures the static-shape, grouped, float32 decode on a GPU: refused where the decode would run
    uncaptured and say nothing."""
    if not m.cuda_graphs:
        return
    if m.static_shapes is False:
        raise ConfigError(
            "cuda_graphs replays the static-shape decode's steps, and static_shapes false turns that decode off: "
            "set static_shapes true (or leave it unset: on for CUDA)"
        )
    if m.bf16 or not m.grouped_forward:
        raise ConfigError(
            "cuda_graphs captures the grouped fast path's float32 decode; "
            + ("bf16 autocasts it" if m.bf16 else "grouped_forward false turns that path off")
            + ": set one of them"
        )


def check_data(
    m: ModelConfig,
    environment: str | None,
    max_completion_length: int,
    model: nn.Module,
    tokenizer,
    train_dataset,
    eval_dataset,
) -> None:
    """The splits' prompts against the tokenizer and the model: a 'prompt' column, characters the tokenizer writes,
    lengths the context holds (with the static decode's padding under cuda_graphs); the environment's replies too."""
    tok = tokenizer
    if len(train_dataset) == 0:
        raise ConfigError(f"dataset {m.dataset_name!r} split {m.dataset_train_split!r} is empty")
    if "prompt" not in train_dataset.column_names:
        raise ConfigError(
            f"dataset {m.dataset_name!r} split {m.dataset_train_split!r} has no 'prompt' column "
            f"(columns: {', '.join(train_dataset.column_names)})"
        )
    vocab_size = model.get_input_embeddings().weight.shape[0]
    if len(tok) != vocab_size:
        raise ConfigError(f"tokenizer has {len(tok)} tokens but the model's vocabulary has {vocab_size}")
    known = {t for t in tok.get_vocab() if t not in tok.all_special_tokens}
    if environment is not None:  # the environment's replies are text the tokenizer must write
        missing = get_environment(environment).missing_chars(known)
        if missing:
            raise ConfigError(
                f"environment {environment}: its calls and replies use {missing!r}, outside the tokenizer's "
                f"vocabulary {''.join(sorted(known))!r}"
            )
    n_pos = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 0)
    for split, ds in (("train", train_dataset), ("eval", eval_dataset)):
        if ds is None:
            continue
        if "prompt" not in ds.column_names:
            raise ConfigError(f"{split} dataset has no 'prompt' column")
        prompts = ds.select_columns(["prompt"]).to_dict()["prompt"]  # (a Column iterated row by row is slow)
        check_prompts(prompts, split, known, n_pos, max_completion_length, m.cuda_graphs and split == "train")


def check_prompts(
    prompts: list[str], split: str, known: set[str], n_pos: int, length: int, padded: bool
) -> None:
    """Each prompt's characters in the vocabulary `known`, and the longest prompt plus `length` completion tokens
    within the model's context of `n_pos` positions (0: unknown); `padded`: as the static decode pads it."""
    for i, p in enumerate(prompts):
        bad = set(p) - known
        if bad:
            raise ConfigError(
                f"{split} dataset row {i + 1}: prompt {p!r} has character {sorted(bad)[0]!r} outside the tokenizer's "
                f"vocabulary {''.join(sorted(known))!r}"
            )
    longest = max(len(p) for p in prompts)  # one token per character
    if n_pos and longest + length > n_pos:
        raise ConfigError(
            f"{split} prompts of {longest} tokens + max_completion_length={length} exceed the model's context of "
            f"{n_pos} positions"
        )
    width = (
        bucket_size(longest) if padded else 0
    )  # the static decode's padded width: its buffers fit the context
    if width and n_pos and width + length > n_pos:
        raise ConfigError(
            f"cuda_graphs: train prompts of up to {longest} tokens are padded to {width}, and with "
            f"max_completion_length={length} they pass the model's context of {n_pos} positions: the decode would "
            "run uncaptured; leave cuda_graphs off"
        )


def check_memory(
    batches: BatchConfig, length: int, eval_pass_k: int, shape: ModelShape, eval_prompts: int
) -> None:
    """The step's batch (sampled at once, then trained on a mini-batch at a time) and pass@k's samples (every
    held-out prompt x eval_pass_k, sampled at once), of completions of up to `length` tokens, must fit the memory
    budget. The other sizes need no bound of their own: num_generations and steps_per_generation enter through the
    batch, max_completion_length through these estimates and the model's context (check_data), and the explore rounds
    and refills resample at most a batch at a time (their number is bounded in GRPOConfig)."""
    budget = memory_budget()
    limit = f"limit ~{gigabytes(budget)}, half this machine's memory"
    n = batches.generation_size
    need = max(shape.decode_bytes(n, length), shape.train_bytes(-(-n // batches.mini_batches), length))
    if need > budget:
        spg = batches.steps_per_generation or 1
        spg = f" x steps_per_generation={spg}" if spg > 1 else ""
        raise ConfigError(
            f"per_device_train_batch_size={batches.per_device_train_batch_size}{spg}: {n:,} completions of up to "
            f"{length} tokens a step would need ~{gigabytes(need)} at once to sample and train on ({limit}); lower "
            "per_device_train_batch_size or max_completion_length"
        )
    k = eval_pass_k
    need = shape.decode_bytes(eval_prompts * k, length)
    if k and need > budget:
        raise ConfigError(
            f"eval_pass_k={k}: {eval_prompts:,} prompts x {k:,} samples of up to {length} tokens would need "
            f"~{gigabytes(need)} at once ({limit}); lower eval_pass_k"
        )
