"""tiny_lm.grouped, the GRPO fast path, against the model's own generic transformers forward (minGPT-style parity).

The oracle is `TinyLMForCausalLM.forward` with a DynamicCache (tinygrpo's `GenericBackend`), itself checked against
one-row-at-a-time forwards in test_rollout.py. Models are random with a large init range, prompts have
different lengths (left padding), completions end at different places. The two paths sum in different orders, so
they are compared in float64 (tests/_numerics.py): the module's `model` is the shared random model in float64.
"""

from __future__ import annotations

import pytest
import torch
from _lm import encode
from _numerics import assert_same_math

from tiny_lm import TinyLMConfig, TinyLMForCausalLM
from tiny_lm.grouped_layout import FrameCache
from tinygrpo.model.backend import CacheDecoder, GenericBackend, GroupedBackend, select_backend
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.sampling import completion_logits, sample_completions

BACKENDS = {True: GroupedBackend, False: GenericBackend}

PROMPTS = ["1+2=", "37+48=", "5+55=", "9+0=", "0+0="]
EOS, PAD, V = 1, 0, 14


@pytest.fixture(scope="module")
def model(model64):
    """The shared random model in float64: every comparison here is of two orders of the same sums."""
    return model64


def completions_with_eos(P: int, G: int, Tc: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random completions whose rows end at random places (EOS, then padding), with their loss mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, V, (P * G, Tc), generator=g)
    ends = torch.randint(0, Tc + 1, (P * G,), generator=g)  # EOS index; Tc = truncated (no EOS)
    mask = torch.zeros(P * G, Tc)
    for r, e in enumerate(ends.tolist()):
        if e < Tc:
            ids[r, e] = EOS
            ids[r, e + 1 :] = PAD
        mask[r, : min(e + 1, Tc)] = 1
    return ids, mask


@pytest.fixture(params=[10**9, 0], ids=["group", "per_sample"])
def max_group_sequence(request) -> int:
    """Both attention layouts of the fast path, chosen by argument: one group sequence per prompt (no batch here
    reaches 10**9 slots), or per sample (past 0 slots: always, when completions feed any token)."""
    return request.param


@pytest.mark.parametrize(
    "P, G, Tc",
    [
        (5, 3, 5),  # the general case
        (5, 1, 4),  # one sample per prompt
        (2, 4, 1),  # one-token completions: only the prompts are fed
        (1, 8, 3),  # a single prompt, a larger group
    ],
)
def test_grouped_logits_equal_the_generic_forward(model, tok, P, G, Tc, max_group_sequence):
    ids, pmask = encode(tok, PROMPTS[:P])
    comp, cmask = completions_with_eos(P, G, Tc, seed=P * 100 + G * 10 + Tc)
    grouped = GroupedBackend(max_group_sequence=max_group_sequence)
    # The backend passes the threshold down to the layout (one-token completions feed nothing to attend per sample).
    assert grouped.layout(model, ids, pmask, comp, G, cmask).per_sample == (
        max_group_sequence == 0 and Tc > 1
    )
    want = completion_logits(model, ids, pmask, comp, G, backend=GenericBackend())
    full = completion_logits(model, ids, pmask, comp, G, backend=grouped)  # no mask: every position
    assert_same_math(full, want)
    packed = completion_logits(model, ids, pmask, comp, G, cmask, backend=grouped)
    m = cmask[..., None].bool()
    assert_same_math(packed[m.expand_as(packed)], want[m.expand_as(want)])
    assert packed[~m.expand_as(packed)].abs().sum() == 0  # positions the mask leaves out are not computed


def test_a_large_group_attends_per_sample_with_memory_linear_in_G(model, tok):
    """Past MAX_GROUP_SEQUENCE slots the layout attends per sample: its mask is one sample's sequence, whatever G
    (the group-sequence mask would be (Tp + G * Tq)^2 per prompt), and the logits are the generic forward's."""
    P, Tc = 2, 5
    ids, pmask = encode(tok, PROMPTS[:P])
    shapes = {}
    for G in (16, 64):
        comp, cmask = completions_with_eos(P, G, Tc, seed=G)
        layout = model.grouped_layout(ids, pmask, comp, G, cmask)
        assert layout.per_sample and layout.num_slots == P * ids.size(1) + P * G * (Tc - 1)
        shapes[G] = tuple(layout.mask.shape)
        want = completion_logits(model, ids, pmask, comp, G, backend=GenericBackend())
        got = model.grouped_logits(layout)
        keep = cmask[..., None].bool().expand_as(got)
        assert_same_math(got[keep], want[keep])
    assert shapes[16] == shapes[64] == (P, 1, ids.size(1) + Tc - 1, ids.size(1) + Tc - 1)
    comp, cmask = completions_with_eos(P, 2, Tc, seed=0)
    small = model.grouped_layout(ids, pmask, comp, 2, cmask)
    assert not small.per_sample  # a short group sequence is attended as one
    # The threshold is an argument: the same batch per sample below it, and one frame cache holds both layouts.
    frames = FrameCache()
    forced = model.grouped_layout(ids, pmask, comp, 2, cmask, frames, max_group_sequence=0)
    assert forced.per_sample and not model.grouped_layout(ids, pmask, comp, 2, cmask, frames).per_sample


def test_per_sample_attention_is_torchs_sdpa_bit_for_bit():
    """The per-sample layout's 5-D attention (`_sdpa_math`) skips torch's safe-softmax row check but is otherwise
    its CPU fallback op for op: outputs and input gradients equal F.scaled_dot_product_attention's exactly, on a
    layout-like mask (each query sees itself, some keys hidden)."""
    import torch.nn.functional as F

    from tiny_lm.grouped import _sdpa_math

    P, G, nh, Tq, Tp, hd = 3, 4, 2, 5, 6, 8
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(P, G, nh, Tq, hd, generator=gen)
    k = torch.randn(P, G, nh, Tp + Tq, hd, generator=gen)
    v = torch.randn(P, G, nh, Tp + Tq, hd, generator=gen)
    hidden = torch.rand(P, 1, 1, Tq, Tp + Tq, generator=gen) < 0.4
    hidden[..., torch.arange(Tq), Tp + torch.arange(Tq)] = False  # each query sees itself
    mask = torch.zeros(hidden.shape).masked_fill(hidden, float("-inf"))
    dy = torch.randn(P, G, nh, Tq, hd, generator=gen)
    results = []
    for attend in (_sdpa_math, lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        y = attend(*leaves, mask)
        results.append((y.detach(), torch.autograd.grad(y, leaves, dy)))
    (y0, g0), (y1, g1) = results
    assert torch.equal(y0, y1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))


def test_grouped_gradients_equal_the_generic_forward(model, tok, max_group_sequence):
    """The loss a trainer builds (masked log-probs of the sampled tokens, weighted): same gradient on every
    parameter, though the fast path never feeds the tokens after EOS."""
    P, G, Tc = 5, 3, 5
    ids, pmask = encode(tok, PROMPTS)
    comp, cmask = completions_with_eos(P, G, Tc, seed=3)
    w = torch.randn(P * G, Tc, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    params = list(model.parameters())
    grads = []
    model.train()
    try:
        for grouped in (True, False):
            backend = GroupedBackend(max_group_sequence=max_group_sequence) if grouped else GenericBackend()
            logits = completion_logits(model, ids, pmask, comp, G, cmask, backend=backend)
            logp = torch.log_softmax(logits, -1).gather(-1, comp[..., None])[..., 0]
            grads.append(torch.autograd.grad((logp * w * cmask).sum(), params))
    finally:
        model.eval()
    for (name, _), a, b in zip(model.named_parameters(), *grads, strict=True):
        assert_same_math(a, b, msg=name)
    assert any(g.abs().sum() > 0 for g in grads[0])


def test_decoder_steps_and_keep_equal_the_cache_decoder(model, tok):
    """Feed the same tokens to both decoders, dropping rows midway: identical next-token logits at every step."""
    G = 3
    ids, pmask = encode(tok, PROMPTS)
    comp, _ = completions_with_eos(len(PROMPTS), G, 4, seed=5)
    fast, slow = model.grouped_decoder(ids, pmask, G), CacheDecoder(model, ids, pmask, G)
    assert_same_math(fast.logits, slow.logits)
    live = torch.arange(comp.size(0))
    for t in range(3):
        if t == 1:  # drop every third row; the rest keep their order
            keep = torch.tensor([i for i in range(live.numel()) if i % 3])
            fast.keep(keep)
            slow.keep(keep)
            live = live[keep]
        a, b = fast.step(comp[live, t]), slow.step(comp[live, t])
        assert a.shape == (live.numel(), V)
        assert_same_math(a, b)


@pytest.mark.parametrize("temperature", [0.0, 1.0, 2.5])
def test_sampling_is_the_same_on_both_paths(model, tok, temperature):
    """Same generator, same logits (to float rounding): the same completions token for token, finished rows
    dropped on both paths."""
    ids, pmask = encode(tok, PROMPTS)
    outs = []
    for grouped in (True, False):
        params, gen = SamplingParams(7, temperature), torch.Generator().manual_seed(11)
        outs.append(
            sample_completions(
                model,
                ids,
                pmask,
                6,
                params,
                gen,
                eos_token_id=EOS,
                pad_token_id=PAD,
                backend=BACKENDS[grouped](),
            )
        )
    a, b = outs
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.completion_mask, b.completion_mask) and torch.equal(a.is_eos, b.is_eos)
    if temperature > 1:
        lengths = a.completion_mask.sum(1)
        assert lengths.min() < lengths.max()  # rows really ended at different steps


def test_context_overflow_is_a_clear_error(tok):
    torch.manual_seed(0)
    small = TinyLMForCausalLM(TinyLMConfig(n_positions=6)).eval()
    ids, pmask = encode(tok, ["37+48="])  # 6 tokens: positions 0..5, the first completion token is position 6
    comp = torch.full((2, 3), 5)
    with pytest.raises(ValueError, match="beyond the model's context"):
        completion_logits(small, ids, pmask, comp, 2, backend=GroupedBackend())
    with pytest.raises(ValueError, match="beyond the model's context"):
        small.grouped_decoder(ids, pmask, 2).step(torch.tensor([5, 5]))


def test_a_model_with_dropout_gets_the_generic_backend(model):
    # The grouped path has no dropout: it is exact for a model without dropout, in either mode, and only then chosen.
    torch.manual_seed(0)
    dropped = TinyLMForCausalLM(TinyLMConfig(dropout=0.1))
    assert not dropped.supports_grouped and model.supports_grouped
    assert isinstance(select_backend(dropped), GenericBackend)
    assert isinstance(select_backend(model), GroupedBackend)
    assert isinstance(select_backend(model, dropped), GenericBackend)  # one backend serves both models
    assert isinstance(select_backend(model, prefer_grouped=False), GenericBackend)


def test_one_layout_serves_every_forward_and_follows_its_inputs(model, tok, max_group_sequence):
    """A layout is built once per batch and scores it with any model; frames come from the caller's cache."""
    ids, pmask = encode(tok, PROMPTS)
    comp, cmask = completions_with_eos(len(PROMPTS), 2, 4, seed=6)
    frames = FrameCache()
    layout = model.grouped_layout(ids, pmask, comp, 2, cmask, frames, max_group_sequence=max_group_sequence)
    assert layout.per_sample == (max_group_sequence == 0)
    again = model.grouped_layout(ids, pmask, comp, 2, cmask, frames, max_group_sequence=max_group_sequence)
    assert again.mask is layout.mask  # the frame was reused
    want = completion_logits(model, ids, pmask, comp, 2, backend=GenericBackend())
    torch.manual_seed(1)
    other = TinyLMForCausalLM(TinyLMConfig(initializer_range=0.3)).eval().double()  # e.g. a reference
    for m in (model, other):
        got = m.grouped_logits(layout)
        ref = want if m is model else completion_logits(other, ids, pmask, comp, 2, backend=GenericBackend())
        keep = cmask[..., None].bool().expand_as(got)
        assert_same_math(got[keep], ref[keep])
        assert got[~keep].abs().sum() == 0
    shorter = cmask.clone()
    shorter[:, 2:] = 0  # a different mask: a new layout, and the logits follow it
    got = model.grouped_logits(
        model.grouped_layout(ids, pmask, comp, 2, shorter, frames, max_group_sequence=max_group_sequence)
    )
    keep = shorter[..., None].bool().expand_as(got)
    assert_same_math(got[keep], want[keep])
    assert got[~keep].abs().sum() == 0


def test_generic_backend_under_activation_checkpointing_gives_the_same_logits_and_gradients(model, tok):
    # Checkpointing replays each block in backward: the generic backend then runs without a cache (a replayed
    # block would write into it twice), and must give what it gives without checkpointing.
    import copy

    ids, pmask = encode(tok, PROMPTS)
    comp, cmask = completions_with_eos(len(PROMPTS), 3, 4, seed=9)
    checkpointed = copy.deepcopy(model).train()
    (
        getattr(checkpointed, "activation_checkpointing_enable", None)
        or checkpointed.gradient_checkpointing_enable
    )()
    plain = copy.deepcopy(model).train()
    outs, saved = [], []
    for m in (plain, checkpointed):
        count = [0]

        def pack(t, count=count):
            count[0] += 1
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = completion_logits(m, ids, pmask, comp, 3, backend=GenericBackend())
        (logits.log_softmax(-1).gather(-1, comp[..., None])[..., 0] * cmask).sum().backward()
        outs.append((logits.detach(), [p.grad for p in m.parameters()]))
        saved.append(count[0])
    assert_same_math(outs[0][0], outs[1][0])
    for a, b in zip(outs[0][1], outs[1][1], strict=True):  # (float sums in another order: a cached forward's)
        assert_same_math(a, b)
    assert saved[1] < saved[0] / 2  # checkpointing was on: the blocks kept far fewer activations for backward


def host_reads(fn) -> int:
    """How many operations of `fn()` read a tensor's values on the host, as the dispatcher sees them: `.item()`,
    `int(t)`, `bool(t)` (aten._local_scalar_dense) and data-dependent shapes (nonzero, boolean indexing). On a GPU
    each waits for the device. (`.tolist()` and `.numpy()` do not dispatch on the CPU: those are checked by reading;
    the layer loops have none.)"""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func).startswith(("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select")):
                Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def host_reads_of_a_fast_path(
    m, ids, pmask, comp, cmask, G: int, max_group_sequence: int
) -> tuple[int, int, int]:
    """(scoring forward with its layout built, decoder prefill, one decode step)."""
    layout = m.grouped_layout(ids, pmask, comp, G, cmask, max_group_sequence=max_group_sequence)
    out = {}
    with torch.no_grad():
        scoring = host_reads(lambda: m.grouped_logits(layout))
        prefill = host_reads(lambda: out.setdefault("dec", m.grouped_decoder(ids, pmask, G)))
        step = host_reads(lambda: out["dec"].step(torch.full((ids.size(0) * G,), 5)))
    return scoring, prefill, step


def test_the_fast_path_reads_no_tensor_on_the_host_per_layer(tok, max_group_sequence):
    """The GPU property, checked on the CPU: the host reads of a scoring forward, of the decoder's prefill and of a
    decode step do not grow with the number of layers; scoring and decoding steps have none at all."""
    ids, pmask = encode(tok, PROMPTS)
    comp, cmask = completions_with_eos(len(PROMPTS), 3, 4, seed=5)
    counts = {}
    for n_layer in (2, 8):
        torch.manual_seed(0)
        m = TinyLMForCausalLM(TinyLMConfig(n_layer=n_layer)).eval()
        counts[n_layer] = host_reads_of_a_fast_path(m, ids, pmask, comp, cmask, 3, max_group_sequence)
    assert counts[2] == counts[8], counts
    assert counts[2][0] == 0 and counts[2][2] == 0, counts
