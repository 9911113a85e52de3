"""Grouped forward passes of TinyLM for GRPO: G completions per prompt, each prompt encoded once.

The same math as `TinyLMForCausalLM.forward` (tests check `allclose` against it), arranged for the shapes GRPO has:
- every prompt's tokens go through the network once, not G times; its keys and values serve its G completions;
- only the tokens that are needed are computed: in scoring, a completion token is fed only when a later token of its
  row is scored (nothing after EOS); in decoding, a row that has finished is dropped from the batch;
- the layers are plain functions on the weights (no module hooks, no cache objects).
In scoring, all position-wise work (LayerNorm, the four linears, GELU) runs on ONE flat (tokens, C) matrix of prompt
and completion tokens together; only attention needs the (prompt, sample, time) structure, and gets it as one
masked SDPA call per layer over P "group sequences" (a prompt, then its samples' tokens), laid out by a
`GroupLayout` (tiny_lm/grouped_layout.py) that the caller builds once per batch. In decoding, the prompts' keys
and values stay shared (attended with one batched matmul per prompt); each row caches only its own tokens.

The model exposes these as `grouped_layout`, `grouped_logits` and `grouped_decoder`; tinygrpo uses them when a
model has them and falls back to the generic transformers forward for any other model.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .grouped_layout import FrameCache, GroupLayout, prompt_frame


# ---------------------------------------------------------------------------------------------------- weights
class LayerWeights(NamedTuple):
    """One block's tensors: (weight, bias) of each linear, (weight, bias, eps) of each LayerNorm."""

    ln_1: tuple
    c_attn: tuple
    attn_proj: tuple
    ln_2: tuple
    c_fc: tuple
    mlp_proj: tuple


class GroupedWeights(NamedTuple):
    wte: torch.Tensor  # (V, C)
    wpe: torch.Tensor  # (n_positions, C)
    layers: list[LayerWeights]
    ln_f: tuple
    lm_head: torch.Tensor  # (V, C), tied to wte
    n_head: int
    n_positions: int


def read_weights(model) -> GroupedWeights:
    """Every tensor the grouped forward uses, looked up by name (one `named_parameters()` walk is cheaper than ~80
    attribute lookups). The tensors are the parameters themselves: updates in place show through."""
    p = dict(model.named_parameters(remove_duplicate=False))
    eps = model.config.layer_norm_epsilon

    def linear(name: str) -> tuple:
        return p[name + ".weight"], p[name + ".bias"]

    def norm(name: str) -> tuple:
        return p[name + ".weight"], p[name + ".bias"], eps

    layers = [
        LayerWeights(
            norm(f"transformer.h.{i}.ln_1"),
            linear(f"transformer.h.{i}.attn.c_attn"),
            linear(f"transformer.h.{i}.attn.c_proj"),
            norm(f"transformer.h.{i}.ln_2"),
            linear(f"transformer.h.{i}.mlp.c_fc"),
            linear(f"transformer.h.{i}.mlp.c_proj"),
        )
        for i in range(model.config.n_layer)
    ]
    cfg = model.config
    return GroupedWeights(
        p["transformer.wte.weight"],
        p["transformer.wpe.weight"],
        layers,
        norm("transformer.ln_f"),
        p["lm_head.weight"],
        cfg.n_head,
        cfg.n_positions,
    )


def _ln(x: torch.Tensor, ln: tuple) -> torch.Tensor:
    return F.layer_norm(x, (x.size(-1),), *ln)


def _qkv(layer: LayerWeights, x: torch.Tensor) -> torch.Tensor:
    """(N, C) -> (N, 3C): q, k, v of LayerNorm'd x in one matmul."""
    return F.linear(_ln(x, layer.ln_1), *layer.c_attn)


def _finish_block(layer: LayerWeights, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Residual attention projection, then the residual GELU MLP: (N, C) -> (N, C)."""
    x = x + F.linear(y, *layer.attn_proj)
    h = F.gelu(F.linear(_ln(x, layer.ln_2), *layer.c_fc))  # (N, 4C)
    return x + F.linear(h, *layer.mlp_proj)


def _embed(w: GroupedWeights, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, w.wte) + F.embedding(pos, w.wpe)


def _head(w: GroupedWeights, x: torch.Tensor) -> torch.Tensor:
    """Final LayerNorm and the (tied) LM head: (N, C) -> (N, V)."""
    return F.linear(_ln(x, w.ln_f), w.lm_head)


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


def grouped_logits(w: GroupedWeights, lay: GroupLayout) -> torch.Tensor:
    """Logits scoring each completion token of a layout's batch: (P*G, Tc, V).

    Position t holds the distribution the model gave completion token t. Positions the layout does not feed (after
    a row's last scored token) are 0. Attention runs per prompt on one "group sequence" of L = Tp + G * Tq slots:
    one attention call over P sequences instead of a prompt pass plus P * G tiny ones; past max_group_sequence
    slots, per sample (its prompt's keys and its own: memory linear in G; tiny_lm/grouped_layout.py).
    """
    P = lay.P
    x = _embed(w, lay.ids, lay.pos)  # (P*Tp + N, C)
    last = len(w.layers) - 1
    for i, layer in enumerate(w.layers):
        qkv = _qkv(layer, x)  # (P*Tp + N, 3C)
        # Unused slots: 0, unseen. In place into the fresh zeros: the out-of-place index_copy would copy them first.
        dense = qkv.new_zeros(lay.num_slots, qkv.size(1)).index_copy_(0, lay.slots, qkv)
        y = _attention(dense, lay, w.n_head)  # (num_slots, C)
        if i == last:
            # After the last attention only the rows that give logits matter: no projection or MLP for the other
            # prompt tokens.
            x, y = x[lay.out_rows], y.index_select(0, lay.out_slots)  # (P + N, C)
        else:
            y = y.index_select(0, lay.slots)  # (P*Tp + N, C)
        x = _finish_block(layer, x, y)
    lg = _head(w, x)  # (P + N, V): each prompt's last column, then the completion tokens
    # The prompt's logits serve its G completions. repeat_interleave, then index_copy: the backward of this pair
    # sums each prompt's G gradients in a fixed order (an index_select from the P rows would sum them in another,
    # and trainings that differ in the last bits drift apart over hundreds of steps).
    vals = torch.cat([lg[:P].repeat_interleave(lay.G, 0), lg[P:]])
    return (
        lg.new_zeros(lay.B * lay.Tc, lg.size(1)).index_copy(0, lay.logit_rows, vals).view(lay.B, lay.Tc, -1)
    )


def _attention(dense: torch.Tensor, lay: GroupLayout, n_head: int) -> torch.Tensor:
    """(num_slots, 3C) q, k, v in the layout's slots -> (num_slots, C) attention outputs."""
    P = lay.P
    if not lay.per_sample:  # one masked SDPA over the P group sequences
        q, k, v = _split_heads(dense, (P, lay.num_slots // P), n_head)  # (P, nh, L, hd)
        return _merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=lay.mask))  # (P * L, C)
    G, Tp, Tq = lay.G, lay.Tp, lay.Tc - 1
    # One split, not two slices: the backward of a slice is a zero tensor the size of `dense` per slice, summed.
    prompts, samples = dense.split([P * Tp, dense.size(0) - P * Tp])
    qp, kp, vp = _split_heads(prompts, (P, Tp), n_head)  # (P, nh, Tp, hd): the prompts among themselves
    yp = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=lay.mask[:, :, :Tp, :Tp])
    qc, kc, vc = _split_heads(samples, (P, G, Tq), n_head)  # (P, G, nh, Tq, hd): each sample's inputs
    # Its prompt's keys and values (one copy per sample: memory linear in G), then its own.
    k = torch.cat([kp.unsqueeze(1).expand(-1, G, -1, -1, -1), kc], dim=-2)  # (P, G, nh, Tp + Tq, hd)
    v = torch.cat([vp.unsqueeze(1).expand(-1, G, -1, -1, -1), vc], dim=-2)
    yc = _sdpa_math(qc, k, v, lay.mask[:, None, :, Tp:])  # mask (P, 1, 1, Tq, Tp + Tq)
    return torch.cat([_merge_heads(yp), _merge_heads(yc)])  # (P*Tp + B*Tq, C)


def _sdpa_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`F.scaled_dot_product_attention(q, k, v, attn_mask=mask)` for inputs of more than 4 dims, op for op as torch's
    CPU math fallback computes it (the same bits, forward and backward), without its "safe" softmax: that one
    checks every row for being wholly masked, which no row of a layout is (each query sees itself), and the check
    cost more than the attention itself on 5-D problems."""
    # The fallback scales q and k by the root of 1 / sqrt(hd) each, not the scores by 1 / sqrt(hd).
    scale = math.sqrt(1.0 / math.sqrt(q.size(-1)))
    scores = torch.matmul(q * scale, k.transpose(-2, -1) * scale) + mask
    return torch.matmul(torch.softmax(scores, -1), v)


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
    def __init__(
        self,
        w: GroupedWeights,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        num_generations: int,
        frames: FrameCache | None = None,
    ) -> None:
        G = num_generations
        self.w = w  # the weights do not change while decoding
        self.nh = w.n_head
        self.scale = (w.wte.size(1) // w.n_head) ** -0.5
        P, Tp = prompt_ids.shape
        self.P, self.G = P, G
        # The prompts alone (G = 1, no completion inputs): positions, lengths, the (P, 1, Tp, Tp) mask.
        fr = (frames or prompt_frame)(prompt_mask, 1, 1, w.wte.dtype)
        x = _embed(w, prompt_ids.reshape(-1), fr.prompt_pos)  # (P*Tp, C)
        mask = fr.mask
        # per layer (P, nh, hd, Tp) keys (transposed), shared by the prompt's G rows
        self.kp: list[torch.Tensor] = []
        self.vp: list[torch.Tensor] = []
        for i, layer in enumerate(w.layers):
            q, k, v = _split_heads(_qkv(layer, x), (P, Tp), self.nh)  # (P, nh, Tp, hd)
            y = _merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))  # (P * Tp, C)
            if i == len(w.layers) - 1:  # only the last column's output is used (the first token's logits)
                x, y = x.view(P, Tp, -1)[:, -1], y.view(P, Tp, -1)[:, -1]
            x = _finish_block(layer, x, y)
            self.kp.append(k.transpose(-1, -2).contiguous())  # (P, nh, hd, Tp): ready for q @ k^T
            self.vp.append(v)
        # per layer (A, nh, t, hd): each row's own tokens
        self.kc: list[torch.Tensor | None] = [None] * len(w.layers)
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
        # The exact check (a host read) only near the limit.
        if self.pos_bound >= w.n_positions and int(self.pos.max()) >= w.n_positions:
            raise ValueError(
                f"sequence reaches position {int(self.pos.max())}, beyond the model's context "
                f"(n_positions={w.n_positions})"
            )
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
