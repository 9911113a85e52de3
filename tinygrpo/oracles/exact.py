"""The exact oracle: expected reward, its gradient and the KL to a reference, by enumerating every completion.

A completion is at most `max_completion_length` (T) tokens: it ends at the first EOS, or is truncated at T tokens.
On our task the vocabulary is tiny, so every completion of a prompt can be listed: with m tokens besides EOS there
are sum_{k<T} m^k completions that end with EOS (k other tokens, then EOS) and m^T truncated ones. The objective
GRPO estimates from G samples,

    J(theta) = mean over prompts x of  sum_y pi_theta(y | x) R(x, y),

and its gradient can then be computed exactly, as can the KL of the completion distribution to a reference. A
sampled estimate (a GRPO step, a KL metric) can be checked against these numbers within its standard error.

Which tokens. `tinygrpo.rollout.sampling.sample_from_logits` samples over the whole logits vector and tiny_lm masks no
logit, so every id of the lm head can be emitted: <pad> (id 0) included (the char tokenizer has no BOS, and the
config's vocab_size is the tokenizer's 14). A sampled <pad> stays in the completion (mask 1, fed back to the
model, dropped from the decoded text). So by default all `vocab_size` ids are enumerated: 13 besides EOS, 30,941
completions per prompt at T = 4 (22,621 without <pad>). A smaller `tokens` set is for models that cannot emit the
other ids; for any other model the probabilities then sum to less than 1, and `exact_objective` raises.

How. The model's distribution at completion position t depends only on the prefix y_<t, a string of t non-EOS
tokens: a node of the prefix tree. There are sum_{t<T} m^t nodes (2,380 at T = 4), against ~31k completions.
Every node is a prefix of one of the m^(T-1) rows "T-1 non-EOS tokens, then any token", and one scoring forward of
those rows (`Backend.layout`/`logits`, the trainer's scorer: each prompt encoded once for its rows) gives the
logits of all nodes. The rest is tensor math on the (P, nodes, V) node logits, in float64: a completion's
log-prob is the sum over its positions of its node's log-softmax at its token (what
`tinygrpo.algorithm.core.selective_log_softmax` gives), and the gradient of J w.r.t. the node logits comes from autograd
on that small table. The gradient w.r.t. the parameters is then one vector-Jacobian product through the scoring
forward, in chunks of rows (each node read from one row only), so memory stays bounded for any T.

Sampling with top_k / top_p is not covered: the oracle is the plain softmax at a temperature.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from rewards import combine_rewards, compute_rewards, resolve_rewards
from tinygrpo.algorithm.core import full_kl
from tinygrpo.model.backend import Backend, GenericBackend, eval_mode
from tinygrpo.model.text import decode_rows, eos_text
from tinygrpo.oracles.completion_space import (
    CompletionSpace,
    expected_position_sum,
    sequence_logprobs,
)


def _chunks(space: CompletionSpace, chunk_rows: int) -> list[tuple[int, int]]:
    R = space.rows.size(0)
    return [(s, min(s + chunk_rows, R)) for s in range(0, R, chunk_rows)]


def _chunk_node_logits(
    model: nn.Module,
    backend: Backend,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    space: CompletionSpace,
    start: int,
    stop: int,
) -> tuple[Tensor, Tensor]:
    """The logits of the nodes whose row is in [start, stop): (nodes in the chunk,) ids, (P, those, V) logits."""
    P, n = prompt_ids.size(0), stop - start
    rows = space.rows[start:stop].to(prompt_ids.device).repeat(P, 1)  # (P*n, T): grouped by prompt
    layout = backend.layout(model, prompt_ids, prompt_mask, rows, n)
    logits = backend.logits(model, layout).view(P, n, rows.size(1), -1)  # (P, n, T, V)
    if logits.size(-1) != space.vocab_size:
        raise ValueError(
            f"the model has {logits.size(-1)} logits, the completion space {space.vocab_size} ids"
        )
    nodes = ((space.node_row >= start) & (space.node_row < stop)).nonzero().squeeze(1)
    r, t = (space.node_row[nodes] - start).to(logits.device), space.node_pos[nodes].to(logits.device)
    return nodes, logits[:, r, t]


def node_logits(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    space: CompletionSpace,
    backend: Backend | None = None,
    chunk_rows: int | None = None,
) -> Tensor:
    """(P, nodes, V) float64 logits of every prefix-tree node of every prompt, without autograd."""
    backend = backend or GenericBackend()
    chunk_rows = chunk_rows or _default_chunk(backend, prompt_ids.size(0))
    out = torch.empty(prompt_ids.size(0), space.num_nodes, space.vocab_size, dtype=torch.float64)
    with torch.no_grad(), eval_mode(model, backend):
        for start, stop in _chunks(space, chunk_rows):
            nodes, logits = _chunk_node_logits(model, backend, prompt_ids, prompt_mask, space, start, stop)
            out[:, nodes] = logits.double().cpu()
    return out


def _default_chunk(backend: Backend, P: int) -> int:
    # Rows per forward (for all P prompts together). The grouped path attends over one sequence of all rows of a
    # prompt (quadratic in the rows): small chunks; the generic forward is linear in them: large ones.
    return max(1, (64 if backend.name == "grouped" else 4096) // P)


# ----------------------------------------------------------------------------------------------------------------
# the oracle


@dataclass(frozen=True)
class ExactResult:
    """Exact statistics of the completion distribution; tensors are float64 on the CPU, one entry per prompt."""

    J: float  # mean over prompts of the expected reward
    grad: Tensor | None  # (n_params,) dJ/dtheta, flat in model.parameters() order (parameters_to_vector's)
    expected_reward: Tensor  # (P,)
    probs: Tensor  # (P, N) pi(y | x) of every completion, in the space's order; each row sums to 1
    logprobs: Tensor  # (P, N)
    expected_length: Tensor  # (P,) E[tokens], EOS included
    # (P,) KL(pi || pi_ref) of the completion distributions = E[sum over the positions of the full KL]
    kl: Tensor | None
    # (P,) kl / expected_length, i.e. E[sum] / E[len]: the limit of the trainer's token-mean KL metric
    kl_per_token: Tensor | None
    accuracy: Tensor | None  # (P,) E[correct]


def exact_objective(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    space: CompletionSpace,
    rewards: Tensor,
    temperature: float = 1.0,
    *,
    ref_model: nn.Module | None = None,
    correct: Tensor | None = None,
    grad: bool = True,
    backend: Backend | None = None,
    chunk_rows: int | None = None,
    atol: float = 1e-5,
) -> ExactResult:
    """Exact J, dJ/dtheta, per-prompt expected rewards, probabilities, KL and accuracy at `temperature`.

    prompt_ids/prompt_mask (P, Tp) left-padded as the trainer's; rewards (P, N) one per prompt and completion of
    `space` (finite: decide what a None reward means before, e.g. with `score_completions(...).nan_to_num(0)`).
    `correct` (P, N) 0/1 gives `accuracy`; without it, 0/1 rewards are their own accuracy (else None).
    `ref_model` gives `kl`. `grad` False skips the gradient (one forward instead of two plus a backward).
    `backend`: how rows are scored, default `GenericBackend` (any causal LM; linear in the rows); `chunk_rows`:
    rows per forward (all prompts together). A model whose forward depends on the mode is run in eval mode, as
    `sample_completions` samples. Raises when the probabilities of a prompt do not sum to 1 within `atol`: the
    enumeration misses tokens the model can emit.
    """
    P, N = prompt_ids.size(0), space.completion_ids.size(0)
    if rewards.shape != (P, N):
        raise ValueError(f"rewards must have shape (P, N) = ({P}, {N}), got {tuple(rewards.shape)}")
    rewards = rewards.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite (a NaN is a None reward: map it to a value first)")
    backend = backend or GenericBackend()
    chunk_rows = chunk_rows or _default_chunk(backend, P)
    chunks = _chunks(space, chunk_rows)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    grad = grad and bool(trainable)

    # One chunk with a gradient: keep its graph and use it for the backward (one forward instead of two).
    graph = None
    if grad and len(chunks) == 1:
        with torch.enable_grad(), eval_mode(model, backend):
            _, graph = _chunk_node_logits(model, backend, prompt_ids, prompt_mask, space, *chunks[0])
        z = graph.detach().double().cpu()
    else:
        z = node_logits(model, prompt_ids, prompt_mask, space, backend, chunk_rows)
    z.requires_grad_(grad)

    with torch.enable_grad():
        logp = sequence_logprobs(z, space, temperature)  # (P, N)
        probs = logp.exp()
        expected = (probs * rewards).sum(-1)  # (P,)
        J = expected.mean()
        dz = torch.autograd.grad(J, z)[0] if grad else None  # (P, nodes, V)
    logp, probs, expected = logp.detach(), probs.detach(), expected.detach()

    total = probs.sum(-1)
    if not bool(((total - 1).abs() <= atol).all()):
        raise ValueError(
            f"completion probabilities sum to {total.tolist()}, not 1: the enumeration misses tokens the model "
            f"can emit (every id of the lm head can be sampled, <pad> included)"
        )
    length = (probs * space.completion_mask.sum(-1)).sum(-1)

    kl = kl_per_token = None
    if ref_model is not None:
        z_ref = node_logits(ref_model, prompt_ids, prompt_mask, space, backend, chunk_rows)
        kl = expected_position_sum(probs, full_kl(z.detach(), z_ref, temperature), space)
        kl_per_token = kl / length

    if correct is not None:
        if correct.shape != (P, N):
            raise ValueError(f"correct must have shape ({P}, {N}), got {tuple(correct.shape)}")
        accuracy = (probs * correct.to("cpu", torch.float64)).sum(-1)
    elif bool(((rewards == 0) | (rewards == 1)).all()):
        accuracy = expected
    else:
        accuracy = None

    flat = None
    if dz is not None:
        flat = _parameter_gradient(model, params, prompt_ids, prompt_mask, space, backend, chunks, dz, graph)
    return ExactResult(float(J.detach()), flat, expected, probs, logp, length, kl, kl_per_token, accuracy)


def _parameter_gradient(
    model: nn.Module,
    params: list[Tensor],
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    space: CompletionSpace,
    backend: Backend,
    chunks: list[tuple[int, int]],
    dz: Tensor,
    graph: Tensor | None,
) -> Tensor:
    """dJ/dtheta = sum over nodes of dJ/dz_node . dz_node/dtheta: a vector-Jacobian product per chunk of rows.

    Each node is read from exactly one row, so each is counted once; `graph` is the single chunk's node logits
    when they were computed with autograd already. The model's own .grad is left alone.
    """
    trainable = [p for p in params if p.requires_grad]
    acc = [torch.zeros(p.shape, dtype=torch.float64, device=p.device) for p in trainable]
    for start, stop in chunks:
        if graph is None:
            with torch.enable_grad(), eval_mode(model, backend):
                nodes, out = _chunk_node_logits(model, backend, prompt_ids, prompt_mask, space, start, stop)
        else:
            nodes, out = torch.arange(space.num_nodes), graph
        g = dz[:, nodes].to(out.device, out.dtype)
        parts = torch.autograd.grad(out, trainable, g, allow_unused=True)
        for a, d in zip(acc, parts, strict=True):
            if d is not None:
                a += d.double()
    by_param = iter(acc)
    flat = [
        next(by_param).flatten() if p.requires_grad else torch.zeros(p.numel(), dtype=torch.float64)
        for p in params
    ]
    return torch.cat([f.cpu() for f in flat])


# ----------------------------------------------------------------------------------------------------------------
# rewards


def score_completions(
    tokenizer: Any,
    prompts: Sequence[str],
    space: CompletionSpace,
    reward_funcs: Sequence[str | Callable[..., Any]],
    weights: Sequence[float] | None = None,
    columns: Mapping[str, Sequence[Any]] | None = None,
    extra_kwargs: Mapping[str, Any] | None = None,
) -> Tensor:
    """(P, N) float64 combined rewards of every completion of `space` for each prompt; NaN where every function
    returned None.

    As the trainer scores (tinygrpo/rollout/generation.py): completions decoded once with <eos> kept (`decode_rows`), the
    functions called with TRL's convention (`compute_rewards`) and combined with `weights` (`combine_rewards`).
    `reward_funcs` are callables or registered names (`rewards.resolve_rewards`); `columns` hold one value per
    prompt (e.g. {"answer": ["85", "7"]}); `extra_kwargs` default to the trainer's (max_completion_length, eos).
    """
    funcs, names, w = resolve_rewards(list(reward_funcs), weights)
    ids = space.completion_ids.tolist()
    lengths = space.completion_mask.sum(1).tolist()
    ids = [row[:n] for row, n in zip(ids, lengths, strict=True)]  # EOS included, as the trainer passes them
    texts = decode_rows(tokenizer, ids)
    N = len(ids)
    if extra_kwargs is None:
        extra_kwargs = {"max_completion_length": space.completion_ids.size(1), "eos": eos_text(tokenizer)}
    out = np.empty((len(prompts), N))
    for p, prompt in enumerate(prompts):
        cols = {k: [v[p]] * N for k, v in (columns or {}).items()}
        per_func = compute_rewards(funcs, names, [prompt] * N, texts, ids, cols, extra_kwargs)
        out[p] = combine_rewards(per_func, w)
    return torch.from_numpy(out)
