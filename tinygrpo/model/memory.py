"""The memory a run's sizes need at once, estimated from the model's shape (ModelShape), and the budget they are held
to: a size that would not fit is refused at start-up with its estimate, not killed by the OS minutes later."""

from __future__ import annotations

import os
from dataclasses import dataclass

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
