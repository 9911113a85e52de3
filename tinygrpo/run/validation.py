"""Checks of a run's inputs (data, tokenizer, model, rewards) that fail fast with one line naming the problem, and
the memory a run's sizes need at once, estimated from the model's shape and refused above a budget."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from rewards import EOS, check_binary, compute_rewards, rewards_float32
from tinygrpo.algorithm.advantage_estimators import needs_binary_rewards
from tinygrpo.data.progress import chunks, progress
from tinygrpo.model.static_shapes import bucket_size
from tinygrpo.rollout.environment import get_environment
from tinygrpo.run.config import ConfigError, GRPOConfig

if TYPE_CHECKING:  # (generation.py imports the model side; the checks need only the type)
    from tinygrpo.rollout.scoring import RewardSpec

# ------------------------------------------------------------------------------------------------ memory at once
# A size that multiplies memory (pass@k's samples, the step's batch, the completion length) is refused at start-up
# when its estimate exceeds the budget, with the estimate in the message, rather than killed by the OS minutes later
# without a word (--eval_pass_k 100000 was killed at 23.8 GB after 137 s). The estimates count float32 values per
# sequence from the model's shape; against the peak resident memory of the reference (2 layers, width 64, 14
# tokens, 4-token completions) they give 6.3 KB a sampled sequence (measured 6.7 KB) and 38 KB a trained one
# (measured 41 KB for a whole step).
MEMORY_FRACTION = (
    0.5  # of the machine's physical memory: the rest is for the process itself, the OS and others
)


def memory_budget() -> int:
    """The bytes a run may hold at once: MEMORY_FRACTION of this machine's physical memory."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_FRACTION)


def gigabytes(n: float) -> str:
    return f"{n / 2**30:,.1f} GB"


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a transformer that its memory grows with (GPT-2's names, or the Llama-style ones)."""

    n_layer: int
    n_embd: int
    n_inner: int  # the MLP's hidden width
    n_head: int
    vocab: int
    context: int  # positions a token may attend to (0: unknown)

    @classmethod
    def of(cls, config: object) -> ModelShape:
        def get(*names: str) -> int:
            return next((int(v) for n in names if (v := getattr(config, n, None))), 0)

        n_embd = get("n_embd", "hidden_size")
        return cls(
            n_layer=get("n_layer", "num_hidden_layers"),
            n_embd=n_embd,
            n_inner=get("n_inner", "intermediate_size") or 4 * n_embd,
            n_head=get("n_head", "num_attention_heads"),
            vocab=get("vocab_size"),
            context=get("n_positions", "max_position_embeddings"),
        )

    def decode_bytes(self, sequences: int, length: int) -> int:
        """Sampling `sequences` completions of up to `length` tokens in one batch: each holds its keys and values
        (every layer, every token) and one step's activations (residual, q/k/v, the MLP's hidden) and logits (with
        the sampler's cumulative distribution)."""
        per_sequence = (
            2 * self.n_layer * self.n_embd * length + 4 * self.n_embd + self.n_inner + 2 * self.vocab
        )
        return 4 * per_sequence * sequences

    def train_bytes(self, sequences: int, length: int) -> int:
        """A forward and backward over `sequences` completions of up to `length` tokens: per token, what each layer
        keeps for the backward (its input and norms, q/k/v, the attention output, the MLP's hidden before and after
        its activation; its attention weights over the context) and the logits with their softmax and entropy."""
        context = self.context or length
        per_layer = 8 * self.n_embd + 2 * self.n_inner + self.n_head * context
        return 4 * (self.n_layer * per_layer + 4 * self.vocab) * length * sequences


def check_memory(cfg: GRPOConfig, shape: ModelShape, eval_prompts: int) -> None:
    """The step's batch (sampled at once, then trained on a mini-batch at a time) and pass@k's samples (every
    held-out prompt x eval_pass_k, sampled at once) must fit the memory budget. The other sizes need no bound of
    their own: num_generations and steps_per_generation enter through the batch, max_completion_length through
    these estimates and the model's context (check_inputs), and the explore rounds and refills resample at most a
    batch at a time (their number is bounded in GRPOConfig)."""
    budget, length = memory_budget(), cfg.max_completion_length
    limit = f"limit ~{gigabytes(budget)}, half this machine's memory"
    n = cfg.generation_size
    need = max(shape.decode_bytes(n, length), shape.train_bytes(-(-n // cfg.mini_batches), length))
    if need > budget:
        spg = (
            f" x steps_per_generation={cfg.steps_per_generation}"
            if (cfg.steps_per_generation or 1) > 1
            else ""
        )
        raise ConfigError(
            f"per_device_train_batch_size={cfg.per_device_train_batch_size}{spg}: {n:,} completions of up to {length} "
            f"tokens a step would need ~{gigabytes(need)} at once to sample and train on ({limit}); lower "
            "per_device_train_batch_size or max_completion_length"
        )
    k = cfg.eval_pass_k
    need = shape.decode_bytes(eval_prompts * k, length)
    if k and need > budget:
        raise ConfigError(
            f"eval_pass_k={k}: {eval_prompts:,} prompts x {k:,} samples of up to {length} tokens would need "
            f"~{gigabytes(need)} at once ({limit}); lower eval_pass_k"
        )


# ------------------------------------------------------------------------------------------------ the inputs


def check_inputs(
    cfg: GRPOConfig,
    model: nn.Module,
    tokenizer,
    train_dataset,
    eval_dataset,
    rewards: RewardSpec,
    device: torch.device | None = None,
) -> None:
    """Bad input -> ConfigError naming the problem, before any training. `device`: the run's (None: not checked)."""
    if cfg.cuda_graphs and cfg.static_shapes is False:
        raise ConfigError(
            "cuda_graphs replays the static-shape decode's steps, and static_shapes false turns that decode off: "
            "set static_shapes true (or leave it unset: on for CUDA)"
        )
    # (else the decode would fall back to today's, uncaptured, and say nothing)
    if cfg.cuda_graphs and (cfg.bf16 or not cfg.grouped_forward):
        raise ConfigError(
            "cuda_graphs captures the grouped fast path's float32 decode; "
            + ("bf16 autocasts it" if cfg.bf16 else "grouped_forward false turns that path off")
            + ": set one of them"
        )
    reward_funcs, reward_names, reward_kwargs, reward_weights = (
        rewards.funcs,
        rewards.names,
        rewards.kwargs,
        rewards.weights,
    )
    tok = tokenizer
    if len(train_dataset) == 0:
        raise ConfigError(f"dataset {cfg.dataset_name!r} split {cfg.dataset_train_split!r} is empty")
    if "prompt" not in train_dataset.column_names:
        raise ConfigError(
            f"dataset {cfg.dataset_name!r} split {cfg.dataset_train_split!r} has no 'prompt' column "
            f"(columns: {', '.join(train_dataset.column_names)})"
        )
    vocab_size = model.get_input_embeddings().weight.shape[0]
    if len(tok) != vocab_size:
        raise ConfigError(f"tokenizer has {len(tok)} tokens but the model's vocabulary has {vocab_size}")
    known = {t for t in tok.get_vocab() if t not in tok.all_special_tokens}
    if cfg.environment is not None:  # the environment's replies are text the tokenizer must write
        missing = get_environment(cfg.environment).missing_chars(known)
        if missing:
            raise ConfigError(
                f"environment {cfg.environment}: its calls and replies use {missing!r}, outside the tokenizer's "
                f"vocabulary {''.join(sorted(known))!r}"
            )
    n_pos = getattr(model.config, "n_positions", None) or getattr(model.config, "max_position_embeddings", 0)
    for split, ds in (("train", train_dataset), ("eval", eval_dataset)):
        if ds is None:
            continue
        if "prompt" not in ds.column_names:
            raise ConfigError(f"{split} dataset has no 'prompt' column")
        prompts = ds.select_columns(["prompt"]).to_dict()["prompt"]  # (a Column iterated row by row is slow)
        for i, p in enumerate(prompts):
            bad = set(p) - known
            if bad:
                ch = sorted(bad)[0]
                raise ConfigError(
                    f"{split} dataset row {i + 1}: prompt {p!r} has character {ch!r} outside the tokenizer's "
                    f"vocabulary {''.join(sorted(known))!r}"
                )
        longest = max(len(p) for p in prompts)  # one token per character
        if n_pos and longest + cfg.max_completion_length > n_pos:
            raise ConfigError(
                f"{split} prompts of {longest} tokens + max_completion_length={cfg.max_completion_length} "
                f"exceed the model's context of {n_pos} positions"
            )
        # the static decode's padded width: its fixed buffers must fit the context
        width = bucket_size(longest) if cfg.cuda_graphs and split == "train" else 0
        if width and n_pos and width + cfg.max_completion_length > n_pos:
            raise ConfigError(
                f"cuda_graphs: train prompts of up to {longest} tokens are padded to {width}, and with "
                f"max_completion_length={cfg.max_completion_length} they pass the model's context of {n_pos} "
                "positions: the decode would run uncaptured; leave cuda_graphs off"
            )
    if cfg.cuda_graphs and device is not None and device.type != "cuda":
        raise ConfigError(f"cuda_graphs needs a CUDA device; this run is on {device.type}")
    scored = eval_dataset is not None and "answer" in eval_dataset.column_names  # (no answers: no evaluation)
    check_memory(cfg, ModelShape.of(model.config), len(eval_dataset) if scored else 0)
    # Every reward function on every row of the train split, and the verifier on every row of the eval split, with
    # the gold answer as the completion: a missing column, a bad signature or an answer the verifier cannot parse
    # fails here, naming the row, not at the first rollout or evaluation.
    weights = reward_weights if reward_weights is not None else [1.0] * len(reward_funcs)
    binary = f"advantage_mode {cfg.advantage_mode}" if needs_binary_rewards(cfg) else None
    where = f"{cfg.dataset_name}/{cfg.dataset_train_split}"
    probe(reward_funcs, reward_names, train_dataset, where, reward_kwargs, weights, binary)
    from tinygrpo.run.evaluation import Verifier

    verifier = Verifier.of(
        cfg.dataset_name, cfg.eval_reward, cfg.task
    )  # the rule held-out accuracy is decided by
    check_held_out(verifier, train_dataset, eval_dataset if scored else None, cfg, reward_kwargs)


def check_held_out(verifier, train_dataset, eval_dataset, cfg, reward_kwargs: dict | None = None) -> None:
    """The start-up checks of a held-out evaluation, one set for both entry points (GRPO's check_inputs, SFT's
    train_reference): the verifier reads every gold answer of the held-out split, and of the training split (whose
    sampled completions GRPO's metrics judge), and scores each 1.0, or its accuracy means nothing; and the two
    splits share no prompt, unless cfg.allow_overlapping_splits. `cfg`: dataset, train_split, eval_split."""
    for split, ds in ((cfg.dataset_test_split, eval_dataset), (cfg.dataset_train_split, train_dataset)):
        if ds is not None and "answer" in ds.column_names:
            where = f"{cfg.dataset_name}/{split}"
            try:
                probe([verifier.fn], [verifier.name], ds, where, reward_kwargs or {})
            except (
                ConfigError
            ) as e:  # (the verifier cannot read this data's answers: say how to choose another)
                raise ConfigError(
                    f"{e}; {verifier.name!r} decides held-out accuracy: {CHOOSE_VERIFIER}"
                ) from None
            check_gold(verifier, ds, where)
    if eval_dataset is not None and not cfg.allow_overlapping_splits:
        check_apart(train_dataset, eval_dataset, cfg)


CHOOSE_VERIFIER = "choose the rule that reads this data's answers with --eval_reward NAME"


def check_gold(verifier, dataset, where: str) -> None:
    """Every gold completion (the verifier's target column, `answer` unless the task's format is another, then
    <eos>) of a row with an answer scores exactly 1.0 under the verifier; ConfigError naming the first row that does
    not."""
    table = dataset.to_dict()
    n = len(table["prompt"])
    column = verifier.target if verifier.target in table else "answer"
    for lo, hi in chunks(n):
        rows = {c: v[lo:hi] for c, v in table.items()}
        golds = ["" if a is None else str(t) + EOS for a, t in zip(rows["answer"], rows[column], strict=True)]
        cols = {c: v for c, v in rows.items() if c != "prompt"}
        ids = [[0] * len(a) for a in golds]
        scores = compute_rewards([verifier.fn], [verifier.name], rows["prompt"], golds, ids, cols)[:, 0]
        for i, (a, score) in enumerate(zip(rows["answer"], scores.tolist(), strict=True)):
            if a is not None and score != 1.0:
                got = "None" if score != score else f"{score:g}"
                what = (
                    f"gold answer {str(a)!r}" if column == "answer" else f"gold {column} {rows[column][i]!r}"
                )
                raise ConfigError(
                    f"{where} row {lo + i + 1}: the held-out verifier {verifier.name!r} scores the {what} "
                    f"{got}, not 1.0, so it would count right answers wrong; {CHOOSE_VERIFIER}"
                )


def check_apart(train_dataset, eval_dataset, cfg) -> None:
    """The held-out split shares no prompt with the training split (held-out accuracy on trained prompts measures
    memory); ConfigError with the count and an example, unless allow_overlapping_splits."""
    train = set(train_dataset.select_columns(["prompt"]).to_dict()["prompt"])
    held = eval_dataset.select_columns(["prompt"]).to_dict()["prompt"]
    shared = [p for p in held if p in train]
    if shared:
        raise ConfigError(
            f"the training split {cfg.dataset_train_split!r} and the held-out split {cfg.dataset_test_split!r} of {cfg.dataset_name} "
            f"share {len(shared):,} of the {len(held):,} held-out prompts (e.g. {shared[0]!r}): held-out accuracy "
            "would be measured on prompts trained on. Evaluate on a split apart (a task's test, or its "
            "validation with the training split that leaves it out), or pass --allow_overlapping_splits true"
        )


def probe(
    funcs: list,
    names: list[str],
    dataset,
    where: str,
    kwargs: dict,
    weights: list[float] | None = None,
    binary: str | None = None,
) -> None:
    """Call the reward functions on every row with the gold answer as the completion; ConfigError naming the first
    row that fails. What they return is judged only where the run could not use it: a value that does not fit
    float32 (alone or weighted and summed), and, where `binary` names what needs 0/1 rewards, a combined reward
    other than 0, 1 or None. (Otherwise a reward may well skip gold-shaped completions.)"""
    table = dataset.to_dict()
    n = len(table["prompt"])
    weights = weights if weights is not None else [1.0] * len(funcs)

    def rewards(lo: int, hi: int) -> None:
        cols = {c: v[lo:hi] for c, v in table.items() if c != "prompt"}
        answers = cols.get("answer", ["0"] * (hi - lo))
        completions = ["" if a is None else str(a) + EOS for a in answers]
        ids = [[0] * len(c) for c in completions]
        per_func = compute_rewards(funcs, names, table["prompt"][lo:hi], completions, ids, cols, kwargs)
        total = rewards_float32(per_func, weights, names, completions)[1]
        if binary:
            check_binary(total, per_func, weights, names, completions, binary)

    blocks = chunks(n)  # (a bar past a few seconds: 200,000 rows take that long)
    try:
        for lo, hi in progress(blocks, len(blocks), f"checking {where} with the rewards", "blocks"):
            rewards(lo, hi)
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
