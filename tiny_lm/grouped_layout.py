"""Where every token of a grouped forward goes: prompt frames and group layouts (index tensors and masks).

A grouped scoring forward (`tiny_lm.grouped.grouped_logits`) runs P prompts and their G completions each as ONE
flat matrix of tokens. Attention needs the structure back: each prompt's "group sequence" of L = Tp + G * Tq slots
(the left-padded prompt, then each sample's Tq = Tc - 1 input tokens), with a mask that lets a completion token see
its prompt's real tokens and its own sample's earlier tokens, never another sample's.

That group sequence costs P * L^2 in the attention mask and scores, quadratic in G. Past `max_group_sequence` slots
(a keyword of the functions below, MAX_GROUP_SEQUENCE by default) the layout is "per sample" instead: the prompts
attend among themselves (P sequences of Tp), and each sample's Tq inputs attend to its prompt's keys and values
(shared, broadcast over the G samples) and its own: P * G * Tq * (Tp + Tq), linear in G. The same math either way
(tests compare both with the model's own forward), summed in another order.

- A `PromptFrame` is the part of that structure that depends only on the prompts' padding and the shape (P, G, Tc):
  positions, slots and the attention mask. A `FrameCache` keeps the frames a caller asks for repeatedly (a trainer
  asks up to three times a step, and equal-length prompts give the same frame every step).
- A `GroupLayout` adds the completions: which completion tokens are fed (those before a row's last scored token:
  nothing after EOS), their positions and slots, and where each logit row lands in the (P*G, Tc) result. One layout
  serves every forward over the same batch (the reference's and the policy's).

Everything here is index arithmetic, built outside inference mode so that a layout made for a no-grad forward can
serve a forward with autograd. The only host reads are per batch (a frame's cache key, the number of tokens fed),
never per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NEG_INF = float("-inf")
# The default longest group sequence (Tp + G * Tq slots) attended as one: beyond it, per-sample attention (memory
# linear in G). The default GRPO batch (G = 8, 4-token answers to ~6-token prompts) has L ~ 30. A caller that wants
# one layout whatever the sizes (tests, benchmarks) passes `max_group_sequence`: 0 for per sample, a huge one for
# the group sequence.
MAX_GROUP_SEQUENCE = 64


def per_sample_attention(Tp: int, G: int, Tq: int, max_group_sequence: int = MAX_GROUP_SEQUENCE) -> bool:
    """Whether a layout of these sizes attends per sample (see the module docstring)."""
    return G * Tq > 0 and Tp + G * Tq > max_group_sequence


@dataclass(frozen=True)
class PromptFrame:
    """What a layout needs from the prompts' padding and the shape (P, G, Tc). A completion input is indexed
    (b, t): completion b, its token t < Tq = Tc - 1."""

    # (P, 1, L, L) additive attention mask over a group sequence (0 = may attend, -inf); per sample, the mask of
    # one sample's sequence (P, 1, Tp + Tq, Tp + Tq): its first Tp rows the prompts', its last Tq every sample's
    mask: torch.Tensor
    prompt_pos: torch.Tensor  # (P*Tp,) positions of the prompt tokens (a prompt's first real token is 0)
    prompt_slots: torch.Tensor  # (P*Tp,) their slots in the (P * L) group sequences (per sample: P*Tp + B*Tq)
    last_cols: torch.Tensor  # (P,) row of each prompt's last column in the flat token matrix
    last_slots: torch.Tensor  # (P,) and its slot in the group sequences
    first_rows: torch.Tensor  # (B,) b * Tc: where each completion's first logits go in the (B * Tc) result
    grid: torch.Tensor  # (3, B, Tq) position, slot and result row of every completion input (b, t)
    prompt_len: torch.Tensor  # (P,) real tokens per prompt: the position of its first completion token
    longest: int  # the longest prompt
    padded: bool  # some prompt is shorter than Tp
    per_sample: bool = False  # per-sample attention (per_sample_attention)
    slots: int = 0  # rows of the slot space: P * L, or P * Tp + B * Tq per sample


@dataclass(frozen=True)
class GroupLayout:
    """Every index a grouped scoring forward needs for one batch; shared by all forwards over that batch."""

    P: int  # prompts
    G: int  # completions per prompt
    Tp: int  # prompt width (left-padded)
    B: int  # completions, P * G
    Tc: int  # completion width
    N: int  # completion tokens fed
    ids: torch.Tensor  # (P*Tp + N,) token ids: every prompt token, then the completion tokens fed
    pos: torch.Tensor  # (P*Tp + N,) their positions
    slots: torch.Tensor  # (P*Tp + N,) their slot in the (P * L) group sequences
    mask: torch.Tensor  # the frame's (PromptFrame.mask)
    out_rows: torch.Tensor  # (P + N,) rows giving logits: each prompt's last column, then completion tokens
    out_slots: torch.Tensor  # (P + N,) their slots in the group sequences
    logit_rows: torch.Tensor  # (B + N,) where those logits go in the (B * Tc) result (a prompt's, G times)
    per_sample: bool = False  # per-sample attention (per_sample_attention)
    num_slots: int = 0  # rows of the slot space


class FrameCache:
    """Frames by padding pattern, shape and dtype, for a caller that builds layouts of the same prompts again and
    again. Bounded (cleared when full); owned by its caller, so its lifetime is the caller's.

    The key reads the mask's values on the host: one small copy per call (a sync on a GPU), none per layer.
    """

    def __init__(self, maxsize: int = 16) -> None:
        self.maxsize = maxsize
        self._frames: dict[tuple, PromptFrame] = {}

    def __call__(
        self,
        prompt_mask: torch.Tensor,
        G: int,
        Tc: int,
        dtype: torch.dtype,
        max_group_sequence: int = MAX_GROUP_SEQUENCE,
    ) -> PromptFrame:
        key = (
            prompt_mask.shape,
            prompt_mask.bool().cpu().numpy().tobytes(),
            G,
            Tc,
            str(prompt_mask.device),
            dtype,
            # the layout it picks: one cache may serve callers with different thresholds
            per_sample_attention(prompt_mask.size(1), G, max(Tc - 1, 0), max_group_sequence),
        )
        frame = self._frames.get(key)
        if frame is None:
            if len(self._frames) >= self.maxsize:
                self._frames.clear()
            frame = self._frames[key] = prompt_frame(prompt_mask, G, Tc, dtype, max_group_sequence)
        return frame


def prompt_geometry(prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (P, Tp) mask -> positions (P, Tp) (a sequence's first real token is position 0), lengths (P,)."""
    m = prompt_mask.long()
    return (m.cumsum(1) - 1).clamp(min=0), m.sum(1)


@torch.inference_mode(False)  # plain tensors: a frame may serve a forward with autograd later
def prompt_frame(
    prompt_mask: torch.Tensor,
    G: int,
    Tc: int,
    dtype: torch.dtype,
    max_group_sequence: int = MAX_GROUP_SEQUENCE,
) -> PromptFrame:
    """The frame of (P, Tp) left-padded prompts with G completions each of width Tc; per-sample attention past
    `max_group_sequence` slots."""
    P, Tp = prompt_mask.shape
    Tq = max(Tc - 1, 0)
    B, L = P * G, Tp + G * Tq
    per_sample = per_sample_attention(Tp, G, Tq, max_group_sequence)
    dev = prompt_mask.device
    ppos, plen = prompt_geometry(prompt_mask)
    b = torch.arange(B, device=dev)[:, None]  # (B, 1)
    t = torch.arange(Tq, device=dev)[None, :]  # (1, Tq)
    ar_p = torch.arange(P, device=dev)
    if per_sample:  # the prompts' P * Tp slots, then each sample's Tq
        slot_c, prompt_stride, num_slots = P * Tp + b * Tq + t, Tp, P * Tp + B * Tq
    else:  # prompt b // G's group sequence, after its prompt and earlier samples
        slot_c, prompt_stride, num_slots = (b // G) * L + Tp + (b % G) * Tq + t, L, P * L
    grid = torch.stack(
        torch.broadcast_tensors(
            plen.repeat_interleave(G)[:, None] + t,  # position: the prompt's length, then t
            slot_c,
            b * Tc + t + 1,  # result row: input t of completion b gives the logits that score its token t + 1
        )
    )
    keep = group_visibility(prompt_mask, 1 if per_sample else G, Tq)
    return PromptFrame(
        mask=torch.zeros(keep.shape, dtype=dtype, device=dev).masked_fill(~keep, NEG_INF),
        prompt_pos=ppos.reshape(-1),
        prompt_slots=(ar_p[:, None] * prompt_stride + torch.arange(Tp, device=dev)).reshape(-1),
        last_cols=ar_p * Tp + Tp - 1,
        last_slots=ar_p * prompt_stride + Tp - 1,
        first_rows=b.view(-1) * Tc,
        grid=grid,
        prompt_len=plen,
        longest=int(plen.max()) if P else 0,
        padded=not bool(prompt_mask.all()),
        per_sample=per_sample,
        slots=num_slots,
    )


def group_visibility(prompt_mask: torch.Tensor, G: int, Tq: int) -> torch.Tensor:
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


# Plain tensors even under inference mode: a layout built for the reference's forward serves the policy's.
@torch.inference_mode(False)
def group_layout(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    num_generations: int,
    completion_mask: torch.Tensor | None = None,
    *,
    n_positions: int | None = None,
    dtype: torch.dtype = torch.float32,
    frames: FrameCache | None = None,
    max_group_sequence: int = MAX_GROUP_SEQUENCE,
) -> GroupLayout:
    """The layout of (P, Tp) prompts and their (P*G, Tc) completions, rows grouped by prompt.

    With `completion_mask` (P*G, Tc) a completion token is fed only when a later token of its row is marked (so
    nothing after EOS is computed); without it every token but the last is fed. `n_positions` (the model's context)
    turns a sequence that would run past it into a ValueError. `frames` reuses frames across calls. Past
    `max_group_sequence` slots (Tp + G * (Tc - 1)) the layout attends per sample (the module docstring).
    """
    G = num_generations
    P, Tp = prompt_ids.shape
    B, Tc = completion_ids.shape
    Tq = Tc - 1  # completion tokens that are inputs (the last one predicts nothing that is scored)
    fr = (frames or prompt_frame)(prompt_mask, G, Tc, dtype, max_group_sequence)
    inputs = completion_ids[:, :Tq]
    if completion_mask is None:
        sel, ids_c = fr.grid.reshape(3, -1), inputs.reshape(-1)
    else:  # feed token t when any token after it is scored
        need = completion_mask[:, 1:].bool().flip(1).cummax(1).values.flip(1)  # (B, Tq)
        sel, ids_c = fr.grid[:, need], inputs[need]  # (3, N), (N,)
    pos_c, slot_c, row_c = sel.unbind(0)
    N, Np = ids_c.numel(), P * Tp
    # The last input of the longest prompt's completions is at position longest + Tq - 1: check exactly only then.
    if (
        n_positions is not None
        and fr.longest + Tq - 1 >= n_positions
        and N
        and int(pos_c.max()) >= n_positions
    ):
        raise ValueError(
            f"sequence reaches position {int(pos_c.max())}, beyond the model's context (n_positions={n_positions})"
        )
    dev = prompt_ids.device
    return GroupLayout(
        P=P,
        G=G,
        Tp=Tp,
        B=B,
        Tc=Tc,
        N=N,
        ids=torch.cat([prompt_ids.reshape(-1), ids_c]),  # prompts first, then the samples' inputs
        pos=torch.cat([fr.prompt_pos, pos_c]),
        slots=torch.cat([fr.prompt_slots, slot_c]),
        mask=fr.mask,
        out_rows=torch.cat([fr.last_cols, torch.arange(Np, Np + N, device=dev)]),
        out_slots=torch.cat([fr.last_slots, slot_c]),
        logit_rows=torch.cat([fr.first_rows, row_c]),
        per_sample=fr.per_sample,
        num_slots=fr.slots,
    )
