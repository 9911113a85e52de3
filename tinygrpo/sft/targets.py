"""The targets a reference imitates: each training problem's target completion (a column, or a mix of two), the
spans of an environment's replies inside it (checked against what the environment answers, left out of the loss)
and the encoded examples."""

from __future__ import annotations

import random

import torch

from tiny_lm.tokenization_tiny_lm import EOS_TOKEN
from tinygrpo.base.progress import chunks, progress
from tinygrpo.rollout.tool_calls import written_calls
from tinygrpo.sft.config import SFTConfig


def encode_examples(
    tokenizer, prompts: list[str], answers: list[str], replies: list[list[tuple[int, int]]] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded (N, T) ids, attention mask, and labels (-100 except on the answer and <eos>, and, with `replies`
    (each answer's environment replies as (start, stop) character offsets), -100 on those too)."""
    texts = [p + a + EOS_TOKEN for p, a in zip(prompts, answers, strict=True)]
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    answer_len = torch.tensor([len(a) + 1 for a in answers])  # +1 for <eos>; one token per character
    pos_from_end = torch.arange(ids.size(1) - 1, -1, -1)[None]  # (1, T): distance from the last column
    labels = ids.masked_fill(pos_from_end >= answer_len[:, None], -100)
    T = ids.size(1)
    for i, spans in enumerate(replies or []):
        first = T - (len(answers[i]) + 1)  # the answer's first column (left padding)
        for start, stop in spans:
            labels[i, first + start : first + stop] = -100
    return ids, mask, labels


def target_replies(
    targets: list[str], env, where: str, rows: list[dict] | None = None
) -> list[list[tuple[int, int]]]:
    """Where each target's environment replies lie ((start, stop) character offsets), each checked to be what the
    environment answers: a target that puts other words in its mouth would teach a reply it never gives. Every call
    of every target is answered by the environment's worker, in blocks, with a bar past a few seconds (a slow tool
    says so, and cannot hang: each call has its deadline)."""
    if env.stateful:
        return episode_replies(targets, env, where, rows or [{} for _ in targets])
    written = [written_calls(t, env, env.max_calls) for t in targets]
    calls = [call for w in written for call, _, _ in w]
    blocks = chunks(len(calls), 256)
    answers = iter(
        reply.text
        for lo, hi in progress(blocks, len(blocks), f"checking {env.name}'s replies in the targets", "blocks")
        for reply in env.call_many(calls[lo:hi])
    )
    spans = []
    for i, (target, w) in enumerate(zip(targets, written, strict=True)):
        spans.append([])
        for call, start, stop in w:
            said, answered = target[start:stop], next(answers)
            if said != answered:
                raise ValueError(
                    f"{where} row {i + 1}: the target's reply to the call {call!r} is {said!r}, but {env.name} "
                    f"answers {answered!r}"
                )
            spans[-1].append((start, stop))
    return spans


def episode_replies(targets: list[str], env, where: str, rows: list[dict]) -> list[list[tuple[int, int]]]:
    """target_replies for an environment over turns: each target replayed on a fresh episode started from its row
    (in the worker, in blocks), its replies checked against what the episode answers."""
    blocks = chunks(len(targets), 256)
    done = progress(blocks, len(blocks), f"replaying {env.name}'s episodes in the targets", "blocks")
    replayed = [
        r
        for lo, hi in done
        for r in env.episode_ops([("transcript", rows[i], targets[i]) for i in range(lo, hi)])
    ]
    spans = []
    for i, (target, calls) in enumerate(zip(targets, replayed, strict=True)):
        if not isinstance(calls, list):
            raise ValueError(
                f"{where} row {i + 1}: {env.name} cannot replay the target {target!r}: its episode answered "
                f"{calls.outcome}"
            )
        spans.append([])
        for call, start, stop, answered in calls:
            if target[start:stop] != answered:
                raise ValueError(
                    f"{where} row {i + 1}: the target's reply to the call {call!r} is {target[start:stop]!r}, but "
                    f"{env.name} answers {answered!r}"
                )
            spans[-1].append((start, stop))
    return spans


def missing_columns(cfg: SFTConfig, columns: list[str]) -> None:
    """A ValueError naming completion_column or mix_column when the training split has no such column."""
    for name in (cfg.completion_column, *([cfg.mix_column] if cfg.mix_column else [])):
        if name not in columns:
            column = "completion_column" if name == cfg.completion_column else "mix_column"
            raise ValueError(
                f"{column} {name!r}: {cfg.dataset_name}/{cfg.dataset_train_split} has no such column (columns: {', '.join(columns)})"
            )


def training_targets(cfg: SFTConfig, train) -> list[str]:
    """Each training problem's target completion: completion_column's, or mix_column's for a fixed share of the
    problems (mix_share, drawn by a generator of its own: the batches' draws are those of an unmixed run)."""
    missing_columns(cfg, train.column_names)
    targets = [str(t) for t in train[cfg.completion_column]]
    if cfg.mix_share > 0:
        alternative = train[cfg.mix_column]
        for i in random.Random(cfg.seed).sample(range(len(targets)), round(cfg.mix_share * len(targets))):
            targets[i] = str(alternative[i])
    return targets
