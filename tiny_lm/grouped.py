"""Grouped forward passes of TinyLM for GRPO: G completions per prompt, each prompt encoded once.

The same math as `TinyLMForCausalLM.forward` (tests check `allclose` against it), arranged for the shapes GRPO has:
- every prompt's tokens go through the network once, not G times; its keys and values serve its G completions;
- only the tokens that are needed are computed: in scoring, a completion token is fed only when a later token of its
  row is scored (nothing after EOS); in decoding, a row that has finished is dropped from the batch;
- the layers are called as plain functions on the module's own parameters (no module hooks or cache objects), and the
  token layout of a batch is built once and shared by the reference and policy forwards.
In scoring, all position-wise work (LayerNorm, the four linears, GELU) runs on ONE flat (tokens, C) matrix of prompt
and completion tokens together; only attention needs the (prompt, sample, time) structure, and gets it as one
masked SDPA call per layer over P "group sequences" (a prompt, then its samples' tokens). In decoding, the prompts'
keys and values stay shared (attended with one batched matmul per prompt); each row caches only its own tokens.

These are fast paths for `tinygrpo.rollout`, which falls back to the generic transformers forward for any other model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------------- weights
class _Layer(NamedTuple):
    """One block's tensors: (weight, bias) of each linear, (weight, bias, eps) of each LayerNorm."""

    ln_1: tuple
    c_attn: tuple
    attn_proj: tuple
    ln_2: tuple
    c_fc: tuple
    mlp_proj: tuple


class _Weights(NamedTuple):
    wte: torch.Tensor  # (V, C)
    wpe: torch.Tensor  # (n_positions, C)
    layers: list[_Layer]
    ln_f: tuple
    lm_head: torch.Tensor  # (V, C), tied to wte
    n_head: int
    n_positions: int


def _weights(model) -> _Weights:
    """Every tensor the grouped forward uses, read from the modules' own parameter dicts.

    Read on every call and never cached, so replaced or reloaded parameters are always the ones used. The dicts
    are read directly because `module.weight` goes through `nn.Module.__getattr__` (~0.3 us), and a forward made
    ~80 such lookups.
    """

    def linear(m) -> tuple:
        return m._parameters["weight"], m._parameters["bias"]

    def norm(m) -> tuple:
        return m._parameters["weight"], m._parameters["bias"], m.eps

    tr = model._modules["transformer"]._modules
    layers = []
    for block in tr["h"]:
        b = block._modules
        attn, mlp = b["attn"]._modules, b["mlp"]._modules
        layers.append(_Layer(norm(b["ln_1"]), linear(attn["c_attn"]), linear(attn["c_proj"]), norm(b["ln_2"]),
                             linear(mlp["c_fc"]), linear(mlp["c_proj"])))  # fmt: skip
    cfg = model.config
    return _Weights(tr["wte"]._parameters["weight"], tr["wpe"]._parameters["weight"], layers, norm(tr["ln_f"]),
                    model._modules["lm_head"]._parameters["weight"], cfg.n_head, cfg.n_positions)  # fmt: skip


def _ln(x: torch.Tensor, ln: tuple) -> torch.Tensor:
    return F.layer_norm(x, (x.size(-1),), *ln)


def _qkv(layer: _Layer, x: torch.Tensor) -> torch.Tensor:
    """(N, C) -> (N, 3C): q, k, v of LayerNorm'd x in one matmul."""
    return F.linear(_ln(x, layer.ln_1), *layer.c_attn)


def _finish_block(layer: _Layer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Residual attention projection, then the residual GELU MLP: (N, C) -> (N, C)."""
    x = x + F.linear(y, *layer.attn_proj)
    h = F.gelu(F.linear(_ln(x, layer.ln_2), *layer.c_fc))  # (N, 4C)
    return x + F.linear(h, *layer.mlp_proj)


def _embed(w: _Weights, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, w.wte) + F.embedding(pos, w.wpe)


def _head(w: _Weights, x: torch.Tensor) -> torch.Tensor:
    """Final LayerNorm and the (tied) LM head: (N, C) -> (N, V)."""
    return F.linear(_ln(x, w.ln_f), w.lm_head)


def _prompt_geometry(prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (P, Tp) mask -> positions (P, Tp) (a sequence's first real token is position 0), lengths (P,)."""
    m = prompt_mask.long()
    return (m.cumsum(1) - 1).clamp(min=0), m.sum(1)


def _split_heads(qkv: torch.Tensor, shape: tuple[int, ...], n_head: int) -> tuple[torch.Tensor, ...]:
    """(N, 3C) with N = prod(shape[:-1]) * shape[-1] tokens -> q, k, v each (*shape[:-1], nh, T, hd)."""
    *lead, T = shape
    C = qkv.size(-1) // 3
    t = qkv.view(*lead, T, 3, n_head, C // n_head)
    d = len(lead)
    return t.permute(d + 1, *range(d), d + 2, d, d + 3).unbind(0)  # 3 x (*lead, nh, T, hd)


def _merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(*lead, nh, T, hd) -> (prod(lead) * T, C)."""
    *lead, nh, T, hd = y.shape
    d = len(lead)
    return y.permute(*range(d), d + 1, d, d + 2).reshape(-1, nh * hd)


# ---------------------------------------------------------------------------------------------------- layout
@dataclass
class _Frame:
    """The part of a layout that depends only on the prompts' padding and the shape (P, G, Tc): memoised, since a
    step asks for it up to three times (decoder, reference, policy) and equal-length prompts give the same one
    every step. A completion input is indexed (b, t): completion b, its token t < Tq = Tc - 1."""

    mask: torch.Tensor  # (P, 1, L, L) additive attention mask over a group sequence (0 = may attend, -inf)
    prompt_pos: torch.Tensor  # (P*Tp,) positions of the prompt tokens
    prompt_slots: torch.Tensor  # (P*Tp,) their slots in the (P * L) group sequences
    last_cols: torch.Tensor  # (P,) row of each prompt's last column in the flat token matrix
    last_slots: torch.Tensor  # (P,) and its slot in the group sequences
    first_rows: torch.Tensor  # (B,) b * Tc: where each completion's first logits go in the (B * Tc) result
    grid: torch.Tensor  # (3, B, Tq) position, slot and result row of every completion input (b, t)
    prompt_len: torch.Tensor  # (P,) real tokens per prompt: the position of its first completion token
    longest: int  # the longest prompt
    padded: bool  # some prompt is shorter than Tp


@dataclass
class GroupLayout:
    """Where every token of a grouped scoring forward goes: computed once per batch, shared by the reference and
    the policy forward (they score the same completions)."""

    P: int  # prompts
    Tp: int  # prompt width (left-padded)
    B: int  # completions, P * G
    Tc: int  # completion width
    N: int  # completion tokens fed
    ids: torch.Tensor  # (P*Tp + N,) token ids: every prompt token, then the completion tokens fed
    pos: torch.Tensor  # (P*Tp + N,) their positions
    slots: torch.Tensor  # (P*Tp + N,) their slot in the (P * L) group sequences
    mask: torch.Tensor  # (P, 1, L, L) additive attention mask over a group sequence
    out_rows: torch.Tensor  # (P + N,) rows that give logits: each prompt's last column, then the completion tokens
    out_slots: torch.Tensor  # (P + N,) their slots in the group sequences
    logit_rows: torch.Tensor  # (B + N,) where those logits go in the (B * Tc) result (the prompt's repeated G times)


def group_layout(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    num_generations: int,
    completion_mask: torch.Tensor | None = None,
    n_positions: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> GroupLayout:
    """The layout of `grouped_logits` for these inputs; the last one is reused while its inputs are the same
    tensors, unmodified (the trainer scores one batch with the reference, then with the policy)."""
    inputs = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    args = (prompt_ids, prompt_mask, completion_ids, num_generations, completion_mask, n_positions, dtype)
    if any(t is not None and t.is_inference() for t in inputs):  # no version counter to tell if they changed
        return _build_layout(*args)
    key = (tuple(None if t is None else (id(t), t._version) for t in inputs), num_generations, n_positions, dtype)
    last = _LAST_LAYOUT[0]  # one read and one write of a single slot: no torn state between threads
    if last is not None and last[0] == key:
        return last[2]
    layout = _build_layout(*args)
    _LAST_LAYOUT[0] = (key, inputs, layout)  # the inputs are held so that their ids cannot be reused meanwhile
    return layout


_LAST_LAYOUT: list = [None]


@torch.inference_mode(False)  # plain tensors even under inference mode: the policy's forward reuses them
def _build_layout(prompt_ids, prompt_mask, completion_ids, G, completion_mask, n_positions, dtype) -> GroupLayout:
    P, Tp = prompt_ids.shape
    B, Tc = completion_ids.shape
    Tq = Tc - 1  # completion tokens that are inputs (the last one predicts nothing that is scored)
    fr = _frame(prompt_mask, G, Tc, dtype)
    inputs = completion_ids[:, :Tq]
    if completion_mask is None:
        sel, ids_c = fr.grid.reshape(3, -1), inputs.reshape(-1)
    else:  # feed token t when any token after it is scored
        need = completion_mask[:, 1:].bool().flip(1).cummax(1).values.flip(1)  # (B, Tq)
        sel, ids_c = fr.grid[:, need], inputs[need]  # (3, N), (N,)
    pos_c, slot_c, row_c = sel.unbind(0)
    N, Np = ids_c.numel(), P * Tp
    # The last input of the longest prompt's completions is at position longest + Tq - 1: check exactly only then.
    if n_positions is not None and fr.longest + Tq - 1 >= n_positions and N and int(pos_c.max()) >= n_positions:
        raise ValueError(f"sequence reaches position {int(pos_c.max())}, beyond the model's context "
                         f"(n_positions={n_positions})")  # fmt: skip
    dev = prompt_ids.device
    return GroupLayout(
        P=P, Tp=Tp, B=B, Tc=Tc, N=N,
        ids=torch.cat([prompt_ids.reshape(-1), ids_c]), pos=torch.cat([fr.prompt_pos, pos_c]),
        slots=torch.cat([fr.prompt_slots, slot_c]), mask=fr.mask,  # prompts first, then the samples' inputs
        out_rows=torch.cat([fr.last_cols, torch.arange(Np, Np + N, device=dev)]),
        out_slots=torch.cat([fr.last_slots, slot_c]), logit_rows=torch.cat([fr.first_rows, row_c]),
    )  # fmt: skip


def _frame(prompt_mask: torch.Tensor, G: int, Tc: int, dtype: torch.dtype) -> _Frame:
    """Memoised `_build_frame`."""
    key = (prompt_mask.shape, prompt_mask.bool().cpu().numpy().tobytes(), G, Tc, str(prompt_mask.device), dtype)
    frame = _FRAMES.get(key)
    if frame is None:
        if len(_FRAMES) >= 16:
            _FRAMES.clear()
        frame = _FRAMES[key] = _build_frame(prompt_mask, G, Tc, dtype)
    return frame


_FRAMES: dict[tuple, _Frame] = {}


@torch.inference_mode(False)  # memoised: may be used with autograd later
def _build_frame(prompt_mask: torch.Tensor, G: int, Tc: int, dtype: torch.dtype) -> _Frame:
    P, Tp = prompt_mask.shape
    Tq = max(Tc - 1, 0)
    B, L = P * G, Tp + G * Tq
    dev = prompt_mask.device
    ppos, plen = _prompt_geometry(prompt_mask)
    b = torch.arange(B, device=dev)[:, None]  # (B, 1)
    t = torch.arange(Tq, device=dev)[None, :]  # (1, Tq)
    ar_p = torch.arange(P, device=dev)
    grid = torch.stack(torch.broadcast_tensors(
        plen.repeat_interleave(G)[:, None] + t,  # position: the prompt's length, then t
        (b // G) * L + Tp + (b % G) * Tq + t,  # slot: prompt b // G's sequence, after the prompt and earlier samples
        b * Tc + t + 1,  # result row: input t of completion b gives the logits that score its token t + 1
    ))  # fmt: skip
    keep = _group_visibility(prompt_mask, G, Tq)
    return _Frame(
        mask=torch.zeros(keep.shape, dtype=dtype, device=dev).masked_fill(~keep, NEG_INF),
        prompt_pos=ppos.reshape(-1), prompt_slots=(ar_p[:, None] * L + torch.arange(Tp, device=dev)).reshape(-1),
        last_cols=ar_p * Tp + Tp - 1, last_slots=ar_p * L + Tp - 1, first_rows=b.view(-1) * Tc, grid=grid,
        prompt_len=plen, longest=int(plen.max()) if P else 0, padded=not bool(prompt_mask.all()),
    )  # fmt: skip


def grouped_logits(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    num_generations: int,
    completion_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits scoring each completion token: (P, Tp) prompts, (P*G, Tc) completions -> (P*G, Tc, V).

    Position t holds the distribution the model gave completion token t (as `completion_logits` in tinygrpo).
    With `completion_mask` (P*G, Tc), only the positions it marks are computed and the rest of the result is 0;
    a completion token is fed only if a later token of its row is marked.

    Attention runs per prompt on one "group sequence" of L = Tp + G * Tq slots: the prompt, then each sample's
    input tokens; a mask lets a completion token see its prompt's real tokens and its own earlier tokens. That is
    one attention call over P sequences instead of a prompt pass plus P * G tiny ones.
    """
    G = num_generations
    w = _weights(model)
    lay = group_layout(prompt_ids, prompt_mask, completion_ids, G, completion_mask, w.n_positions, w.wte.dtype)
    P = lay.P
    L = lay.mask.size(-1)
    x = _embed(w, lay.ids, lay.pos)  # (P*Tp + N, C)
    last = len(w.layers) - 1
    for i, layer in enumerate(w.layers):
        qkv = _qkv(layer, x)  # (P*Tp + N, 3C)
        dense = qkv.new_zeros(P * L, qkv.size(1)).index_copy(0, lay.slots, qkv)  # unused slots stay 0, unseen
        q, k, v = _split_heads(dense, (P, L), w.n_head)  # (P, nh, L, hd)
        y = _merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=lay.mask))  # (P * L, C)
        if i == last:  # after the last attention only the rows that give logits matter: no projection or MLP for
            x, y = x[lay.out_rows], y.index_select(0, lay.out_slots)  # the other prompt tokens  (P + N, C)
        else:
            y = y.index_select(0, lay.slots)  # (P*Tp + N, C)
        x = _finish_block(layer, x, y)
    lg = _head(w, x)  # (P + N, V): each prompt's last column, then the completion tokens
    # The prompt's logits serve its G completions. (repeat_interleave, not an index_select: its backward sums the G
    # gradients in the order the published runs used; an index_add order changes training in the last bits.)
    vals = torch.cat([lg[:P].repeat_interleave(G, 0), lg[P:]])
    return lg.new_zeros(lay.B * lay.Tc, lg.size(1)).index_copy(0, lay.logit_rows, vals).view(lay.B, lay.Tc, -1)


def _group_visibility(prompt_mask: torch.Tensor, G: int, Tq: int) -> torch.Tensor:
    """(P, Tp) left-padded prompt mask -> (P, 1, L, L) boolean visibility over the group sequence
    [prompt (Tp); sample 0's Tq inputs; ...; sample G-1's], True = may attend.

    A prompt token sees the real prompt tokens up to itself (and itself: a padding query's output is unused, but an
    all-hidden row would make NaN); a completion token sees the real prompt tokens and its own sample's tokens up
    to itself, never another sample's.
    """
    P, Tp = prompt_mask.shape
    L = Tp + G * Tq
    dev = prompt_mask.device
    real = prompt_mask.bool()
    ar = torch.arange(L, device=dev)
    is_prompt = ar < Tp
    sample = torch.where(is_prompt, -1, (ar - Tp).div(Tq, rounding_mode="floor") if Tq else ar)  # (L,)
    same_sample = (sample[:, None] == sample[None, :]) & ~is_prompt[:, None]  # both in one sample
    own = same_sample & (ar[None, :] <= ar[:, None])  # own earlier tokens and itself
    prompt_key = is_prompt[None, :] & ((ar[None, :] <= ar[:, None]) | ~is_prompt[:, None])  # (L, L)
    key_real = torch.cat([real, torch.ones(P, L - Tp, dtype=torch.bool, device=dev)], dim=1)  # (P, L)
    keep = (prompt_key[None] & key_real[:, None, :]) | own[None] | torch.eye(L, dtype=torch.bool, device=dev)
    return keep[:, None]  # (P, 1, L, L)


class GroupedDecoder:
    """Incremental decoding of G samples per prompt: the prompts' keys and values are computed once and shared, each
    row keeps only its own completion tokens' keys and values, and a finished row leaves the batch.

    `logits` (A, V) scores the next token of each of the A live rows (A = P * G at first, grouped by prompt);
    `keep(rows)` drops every other row; `step(tokens)` feeds one token per live row and refreshes `logits`.
    Attention to the prompt runs on the (P, G) grid of all rows as one batched matmul per prompt (live queries
    scattered in, dead ones zero); attention to a row's own tokens is a broadcast product over at most
    max_new_tokens keys. Nothing of size rows x prompt length is ever copied.
    """

    @torch.inference_mode()
    def __init__(self, model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, num_generations: int) -> None:
        G = num_generations
        self.w = w = _weights(model)  # the weights do not change while decoding
        self.nh = w.n_head
        self.scale = (w.wte.size(1) // w.n_head) ** -0.5
        P, Tp = prompt_ids.shape
        self.P, self.G = P, G
        fr = _frame(prompt_mask, 1, 1, w.wte.dtype)  # the prompts alone: positions, lengths, (P, 1, Tp, Tp) mask
        x = _embed(w, prompt_ids.reshape(-1), fr.prompt_pos)  # (P*Tp, C)
        mask = fr.mask
        self.kp: list[torch.Tensor] = []  # per layer (P, nh, hd, Tp) keys (transposed), shared by the prompt's G rows
        self.vp: list[torch.Tensor] = []
        for i, layer in enumerate(w.layers):
            q, k, v = _split_heads(_qkv(layer, x), (P, Tp), self.nh)  # (P, nh, Tp, hd)
            y = _merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))  # (P * Tp, C)
            if i == len(w.layers) - 1:  # only the last column's output is used (the logits of the first token)
                x, y = x.view(P, Tp, -1)[:, -1], y.view(P, Tp, -1)[:, -1]
            x = _finish_block(layer, x, y)
            self.kp.append(k.transpose(-1, -2).contiguous())  # (P, nh, hd, Tp): ready for q @ k^T
            self.vp.append(v)
        self.kc: list[torch.Tensor | None] = [None] * len(w.layers)  # per layer (A, nh, t, hd): each row's tokens
        self.vc: list[torch.Tensor | None] = [None] * len(w.layers)
        # (P, 1, 1, Tp) additive: padding keys hidden. The prompt's last row of the mask sees every real prompt token.
        self.prompt_bias = mask[:, :, -1:] if fr.padded else None
        self.rows = torch.arange(P * G, device=x.device)  # each live row's place in the (P, G) grid
        self.logits = _head(w, x).repeat_interleave(G, 0)  # (P*G, V)
        self.pos = fr.prompt_len.repeat_interleave(G)  # (P*G,) position of each row's next token
        self.pos_bound = fr.longest  # >= every live row's next position

    @torch.inference_mode()
    def keep(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (indices into the current live rows), in that order."""
        self.kc = [None if k is None else k.index_select(0, rows) for k in self.kc]
        self.vc = [None if v is None else v.index_select(0, rows) for v in self.vc]
        self.rows, self.pos, self.logits = self.rows[rows], self.pos[rows], self.logits[rows]

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """(A,) next tokens of the live rows -> (A, V) logits for the token after them."""
        w = self.w
        if self.pos_bound >= w.n_positions and int(self.pos.max()) >= w.n_positions:  # exact check only near it
            raise ValueError(f"sequence reaches position {int(self.pos.max())}, beyond the model's context "
                             f"(n_positions={w.n_positions})")  # fmt: skip
        A = tokens.numel()
        x = _embed(w, tokens, self.pos)  # (A, C)
        for i, layer in enumerate(w.layers):
            q, k, v = _split_heads(_qkv(layer, x), (A, 1), self.nh)  # (A, nh, 1, hd)
            self.kc[i] = k if self.kc[i] is None else torch.cat([self.kc[i], k], dim=2)  # (A, nh, t + 1, hd)
            self.vc[i] = v if self.vc[i] is None else torch.cat([self.vc[i], v], dim=2)
            x = _finish_block(layer, x, self._attend(i, q * self.scale))
        self.pos, self.pos_bound = self.pos + 1, self.pos_bound + 1
        self.logits = _head(w, x)
        return self.logits

    def _attend(self, i: int, q: torch.Tensor) -> torch.Tensor:
        """(A, nh, 1, hd) scaled queries of the live rows -> (A, C): softmax over [prompt keys; own keys]."""
        P, G = self.P, self.G
        A, nh, _, hd = q.shape
        full = A == P * G  # no row dropped yet: the live rows ARE the (P, G) grid, in order
        grid = q[:, :, 0] if full else q.new_zeros(P * G, nh, hd).index_copy(0, self.rows, q[:, :, 0])
        sp = grid.view(P, G, nh, hd).transpose(1, 2) @ self.kp[i]  # (P, nh, G, Tp)
        if self.prompt_bias is not None:
            sp = sp + self.prompt_bias
        sp = sp.transpose(1, 2).reshape(P * G, nh, -1)  # (P*G, nh, Tp)
        if not full:
            sp = sp.index_select(0, self.rows)  # (A, nh, Tp)
        s = torch.cat([sp, (q * self.kc[i]).sum(-1)], dim=-1)  # (A, nh, Tp + t + 1): prompt, then own tokens
        e = torch.exp(s - s.amax(-1, keepdim=True))
        p = e / e.sum(-1, keepdim=True)
        Tp = sp.size(-1)
        pp = p[..., :Tp]  # (A, nh, Tp)
        if not full:
            pp = pp.new_zeros(P * G, nh, Tp).index_copy(0, self.rows, pp)
        yp = (pp.reshape(P, G, nh, Tp).transpose(1, 2) @ self.vp[i]).transpose(1, 2).reshape(P * G, nh, hd)
        if not full:
            yp = yp.index_select(0, self.rows)  # (A, nh, hd)
        yo = (p[..., Tp:].unsqueeze(-1) * self.vc[i]).sum(-2)  # (A, nh, hd)
        return (yp + yo).reshape(A, nh * hd)
