"""Checks of a run's inputs (data, tokenizer, model, rewards) that fail fast with one line naming the problem."""

from __future__ import annotations

import torch.nn as nn

from rewards import EOS, accuracy, compute_rewards

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
                    f"{split} dataset row {i + 1}: prompt {p!r} has character {ch!r} outside the tokenizer's "
                    f"vocabulary {''.join(sorted(known))!r}"
                )
        longest = max(len(p) for p in ds["prompt"])  # one token per character
        if n_pos and longest + cfg.max_completion_length > n_pos:
            raise ConfigError(
                f"{split} prompts of {longest} tokens + max_completion_length={cfg.max_completion_length} "
                f"exceed the model's context of {n_pos} positions"
            )
    # Every reward function on every row of the train split, and the verifier on every row of the eval split, with
    # the gold answer as the completion: a missing column, a bad signature or an answer the verifier cannot parse
    # fails here, naming the row, not at the first rollout or evaluation.
    probe(reward_funcs, reward_names, train_dataset, f"{cfg.dataset}/{cfg.train_split}", reward_kwargs)
    if eval_dataset is not None and "answer" in eval_dataset.column_names:
        probe([accuracy], ["accuracy"], eval_dataset, f"{cfg.dataset}/{cfg.eval_split}", reward_kwargs)


def probe(funcs: list, names: list[str], dataset, where: str, kwargs: dict) -> None:
    """Call the reward functions on every row with the gold answer as the completion; ConfigError naming the first
    row that fails. (What they return is not judged here: a reward may well skip gold-shaped completions.)"""
    table = dataset.to_dict()
    n = len(table["prompt"])

    def rewards(lo: int, hi: int):
        cols = {c: v[lo:hi] for c, v in table.items() if c != "prompt"}
        answers = cols.get("answer", ["0"] * (hi - lo))
        completions = ["" if a is None else str(a) + EOS for a in answers]
        ids = [[0] * len(c) for c in completions]
        return compute_rewards(funcs, names, table["prompt"][lo:hi], completions, ids, cols, kwargs)

    try:
        rewards(0, n)
    except ValueError as whole:
        lo, hi = 0, n  # a row in [lo, hi) fails: find the first one
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                rewards(lo, mid)
                lo = mid
            except ValueError:
                hi = mid
        try:
            rewards(lo, lo + 1)
        except ValueError as e:
            raise ConfigError(f"{where} row {lo + 1}: {e}") from None
        raise ConfigError(f"{where}: {whole}") from None  # (no single row fails: the split as a whole does)
