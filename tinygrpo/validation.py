"""Checks of a run's inputs (data, tokenizer, model, rewards) that fail fast with one line naming the problem."""

from __future__ import annotations

import torch.nn as nn

from rewards import EOS, compute_rewards

from .config import ConfigError, GRPOConfig


def check_inputs(
    cfg: GRPOConfig,
    model: nn.Module,
    tokenizer,
    train_dataset,
    eval_dataset,
    reward_funcs: list,
    reward_names: list[str],
    reward_kwargs: dict,
) -> None:
    """Bad input -> ConfigError naming the problem, before any training."""
    tok = tokenizer
    if len(train_dataset) == 0:
        raise ConfigError(f"dataset {cfg.dataset!r} split {cfg.train_split!r} is empty")
    if "prompt" not in train_dataset.column_names:
        raise ConfigError(
            f"dataset {cfg.dataset!r} split {cfg.train_split!r} has no 'prompt' column "
            f"(columns: {', '.join(train_dataset.column_names)})"
        )
    vocab_size = model.get_input_embeddings().weight.shape[0]
    if len(tok) != vocab_size:
        raise ConfigError(f"tokenizer has {len(tok)} tokens but the model's vocabulary has {vocab_size}")
    known = {t for t in tok.get_vocab() if t not in tok.all_special_tokens}
    n_pos = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 0)
    for split, ds in (("train", train_dataset), ("eval", eval_dataset)):
        if ds is None:
            continue
        if "prompt" not in ds.column_names:
            raise ConfigError(f"{split} dataset has no 'prompt' column")
        for i, p in enumerate(ds["prompt"]):
            bad = set(p) - known
            if bad:
                ch = sorted(bad)[0]
                raise ConfigError(
                    f"{split} dataset row {i}: prompt {p!r} has character {ch!r} outside the tokenizer's "
                    f"vocabulary {''.join(sorted(known))!r}"
                )
        longest = max(len(p) for p in ds["prompt"])  # one token per character
        if n_pos and longest + cfg.max_completion_length > n_pos:
            raise ConfigError(
                f"{split} prompts of {longest} tokens + max_completion_length={cfg.max_completion_length} "
                f"exceed the model's context of {n_pos} positions"
            )
    # Probe every reward function on two real rows: a missing column or a bad signature fails here, not
    # after the first rollout.
    rows = train_dataset.select(range(min(2, len(train_dataset))))
    columns = {c: rows[c] for c in train_dataset.column_names if c != "prompt"}
    probe = [str(a) + EOS for a in columns.get("answer", ["0"] * len(rows))]
    try:
        compute_rewards(
            reward_funcs,
            reward_names,
            rows["prompt"],
            probe,
            [[0] * len(s) for s in probe],
            columns,
            reward_kwargs,
        )
    except ValueError as e:
        raise ConfigError(f"{e} (while probing the reward functions on dataset {cfg.dataset!r})") from None
