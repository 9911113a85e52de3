"""Every completion of a prompt, as a prefix tree: the space the exact oracle (exact.py) sums over.

A completion is at most T tokens: it ends at the first EOS, or is truncated at T tokens. With m tokens besides EOS
there are sum_{k<T} m^k completions that end with EOS and m^T truncated ones; the model's distribution at position t
depends on the prefix y_<t alone, a node of the tree (sum_{t<T} m^t nodes). `completion_space` lists both, and each
completion's nodes, so that a completion's log-prob is a sum over its nodes' log-softmax (sequence_logprobs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class CompletionSpace:
    """Every completion of length <= T over a token set, and the prefix tree that scores them.

    Completions are ordered by length, then lexicographically by token rank (`tokens` order): [EOS], [a, EOS] for
    each non-EOS a, ..., then the T-token completions that end with EOS, then the m^T truncated ones.
    """

    completion_ids: Tensor  # (N, T) long, pad after EOS (rollout.decode's convention)
    completion_mask: Tensor  # (N, T) long, 1 up to and including the first EOS
    path: Tensor  # (N, T) long: the node (prefix y_<t) that gives token t its distribution; 0 where masked
    rows: Tensor  # (R, T) long, R = m^(T-1): every T-1 non-EOS tokens, then a filler token (never fed)
    node_row: Tensor  # (nodes,) long: the row whose position `node_pos` reads the node's logits
    node_pos: Tensor  # (nodes,) long: that position (= the node's depth)
    vocab_size: int
    eos_token_id: int

    @property
    def num_nodes(self) -> int:
        return self.node_row.numel()


def completion_count(num_tokens: int, max_completion_length: int) -> int:
    """Completions of at most T tokens over `num_tokens` ids including EOS: sum_{k<T} m^k + m^T, m = num_tokens - 1."""
    m, T = num_tokens - 1, max_completion_length
    return sum(m**k for k in range(T)) + m**T


def _digits(n: int, m: int, k: int) -> Tensor:
    """(n, k) long: the base-m digits (most significant first) of 0 .. n-1, i.e. all k-tuples in lexicographic order."""
    codes = torch.arange(n)[:, None]
    powers = m ** torch.arange(k - 1, -1, -1)[None, :] if k else torch.zeros(1, 0, dtype=torch.long)
    return (codes // powers) % m


def completion_space(
    vocab_size: int,
    eos_token_id: int,
    pad_token_id: int,
    max_completion_length: int,
    tokens: Sequence[int] | None = None,
) -> CompletionSpace:
    """The completions and prefix tree for `tokens` (default: every id 0 .. vocab_size-1, see the module doc)."""
    T = max_completion_length
    if T < 1:
        raise ValueError(f"max_completion_length must be >= 1, got {T!r}")
    ids = list(range(vocab_size)) if tokens is None else list(tokens)
    if len(set(ids)) != len(ids) or not all(0 <= t < vocab_size for t in ids):
        raise ValueError(f"tokens must be distinct ids in [0, {vocab_size}), got {ids}")
    if eos_token_id not in ids:
        raise ValueError(f"tokens must include eos_token_id={eos_token_id}")
    other = torch.tensor([t for t in ids if t != eos_token_id], dtype=torch.long)  # (m,) by rank
    m = other.numel()

    parts = []
    for k in range(T):  # k non-EOS tokens, then EOS, then padding
        body = other[_digits(m**k, m, k)]  # (m^k, k)
        eos = torch.full((body.size(0), 1), eos_token_id)
        pad = torch.full((body.size(0), T - k - 1), pad_token_id)
        parts.append(torch.cat([body, eos, pad], 1))
    parts.append(other[_digits(m**T, m, T)])  # truncated: T non-EOS tokens
    completion_ids = torch.cat(parts)
    is_eos = completion_ids == eos_token_id
    completion_mask = ((is_eos.cumsum(1) - is_eos.long()) == 0).long()  # rollout.decode's mask

    # Node (depth t, prefix code c) is number offset[t] + c, c the prefix read as a base-m number of token ranks.
    offset = torch.tensor([sum(m**d for d in range(t)) for t in range(T)], dtype=torch.long)  # (T,)
    rank = torch.zeros(vocab_size, dtype=torch.long)
    rank[other] = torch.arange(m)
    r = rank[completion_ids]  # (N, T); garbage where masked or at EOS, never used there
    code = torch.zeros_like(r)
    for t in range(1, T):
        code[:, t] = code[:, t - 1] * m + r[:, t - 1]
    path = (offset + code) * completion_mask

    # Rows: every (T-1)-prefix of non-EOS tokens, plus a filler (the last token of a row is never fed). Node (t, c)
    # is read at position t of row c * m^(T-1-t): the first row that starts with the prefix.
    R = m ** (T - 1)
    filler = torch.full((R, 1), eos_token_id)
    rows = torch.cat([other[_digits(R, m, T - 1)], filler], 1)
    node_row = torch.cat([torch.arange(m**t) * m ** (T - 1 - t) for t in range(T)])
    node_pos = torch.cat([torch.full((m**t,), t) for t in range(T)])
    return CompletionSpace(
        completion_ids, completion_mask, path, rows, node_row, node_pos, vocab_size, eos_token_id
    )


def enumerate_completions(
    vocab_size: int,
    eos_token_id: int,
    pad_token_id: int,
    max_completion_length: int,
    tokens: Sequence[int] | None = None,
) -> tuple[Tensor, Tensor]:
    """(completion_ids (N, T), completion_mask (N, T)) of every completion, as `completion_space` lists them."""
    space = completion_space(vocab_size, eos_token_id, pad_token_id, max_completion_length, tokens)
    return space.completion_ids, space.completion_mask


# ----------------------------------------------------------------------------------------------------------------
# the math, on node logits


def sequence_logprobs(node_logits: Tensor, space: CompletionSpace, temperature: float = 1.0) -> Tensor:
    """log pi(y | x) of every completion: (P, nodes, V) node logits -> (P, N).

    Sum over the completion's positions of log softmax(logits / temperature) of its node, at its token.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    node_logp = torch.log_softmax(node_logits / temperature, dim=-1)  # (P, nodes, V)
    flat = node_logp.flatten(1)  # (P, nodes * V)
    index = (space.path * space.vocab_size + space.completion_ids * space.completion_mask).flatten()
    per_token = flat[:, index].view(-1, *space.path.shape)  # (P, N, T)
    return (per_token * space.completion_mask).sum(-1)


def expected_position_sum(probs: Tensor, per_node: Tensor, space: CompletionSpace) -> Tensor:
    """E_y[sum over y's positions t of f(node of y_<t)]: (P, N) probabilities, (P, nodes) f -> (P,)."""
    per_completion = (per_node[:, space.path] * space.completion_mask).sum(-1)  # (P, N)
    return (probs * per_completion).sum(-1)


# ----------------------------------------------------------------------------------------------------------------
# the model's node logits
