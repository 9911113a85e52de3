"""Completion token ids back to text, with <eos> kept, so that a verifier can tell a finished answer from a
truncated one."""

from __future__ import annotations

import torch


def eos_text(tokenizer) -> str:
    """The tokenizer's end-of-sequence text as decoding writes it ("<eos>" for tiny_lm, "<|endoftext|>" for GPT-2):
    what the trainer passes reward functions as `eos`, and what ends a gold completion in the start-up checks."""
    return tokenizer.decode([tokenizer.eos_token_id], skip_special_tokens=False)


def decode_completions(
    tokenizer, completion_ids: torch.Tensor, completion_mask: torch.Tensor, cache: dict | None = None
) -> list[str]:
    """Decode keeping <eos> (so a verifier can tell a finished answer from a truncated one), dropping padding.

    `cache` (a dict the caller keeps) maps token tuples to text: GRPO samples the same short completions over and
    over, and the tokenizer is only asked for new ones. Exact: equal ids decode to equal text.
    """
    ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id).tolist()
    return decode_rows(tokenizer, ids, cache)


def decode_rows(tokenizer, ids: list[list[int]], cache: dict | None = None) -> list[str]:
    """`decode_completions` on token-id lists: <eos> kept, padding ids dropped, `cache` as there."""
    pad = tokenizer.pad_token_id
    # (a row cut at its length holds no pad: checked at C speed, filtered only where it does)
    rows = [tuple(row) if pad not in row else tuple(t for t in row if t != pad) for row in ids]
    if cache is None:
        return tokenizer.batch_decode([list(r) for r in rows], skip_special_tokens=False)
    if len(cache) > 1 << 16:  # bounded: start over rather than grow without limit
        cache.clear()
    new = list({r for r in rows if r not in cache})
    if new:
        cache.update(
            zip(new, tokenizer.batch_decode([list(r) for r in new], skip_special_tokens=False), strict=True)
        )
    return [cache[r] for r in rows]
