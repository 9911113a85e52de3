"""Small helpers shared by the tiny_lm / rollout test modules."""

from __future__ import annotations


def encode(tok, prompts: list[str]):
    """Left-padded (input_ids, attention_mask) of a batch of prompts."""
    enc = tok(prompts, padding=True, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]
