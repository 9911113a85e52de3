"""tinygrpo.rollout.sampling: batched sampling with a shared prompt cache, completion logits, and the sampler itself.

Models are random with a fixed seed and a large init range, so greedy paths differ between prompts.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _lm import encode
from _numerics import assert_same_math
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrpo.base.options import ConfigError
from tinygrpo.model.backend import GenericBackend, GroupedBackend, select_backend
from tinygrpo.model.text import decode_completions, decode_rows
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.sampling import completion_logits, sample_completions, sample_from_logits

PROMPTS = ["1+2=", "37+48=", "5+55=", "9+0="]  # different lengths, so the batch is left-padded
EOS, PAD = 1, 0


# ---------------------------------------------------------------- sample_completions


# tiny_lm's fast path and the generic transformers forward
@pytest.mark.parametrize("backend", [GroupedBackend, GenericBackend])
@pytest.mark.parametrize("G", [1, 3])  # G = 1 skips the cache repeat; G = 3 exercises it
def test_greedy_rows_equal_generate(model, tok, G, backend):
    ids, mask = encode(tok, PROMPTS)
    greedy = SamplingParams.greedy(8)
    ro = sample_completions(
        model, ids, mask, G, greedy, eos_token_id=EOS, pad_token_id=PAD, backend=backend()
    )
    P = len(PROMPTS)
    assert ro.completion_ids.shape[0] == P * G and ro.completion_ids.shape[1] <= 8
    ref = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=8,
        do_sample=False,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )[:, ids.size(1) :]
    for p in range(P):
        for g in range(G):
            # rows grouped by prompt: prompt p owns rows p*G .. p*G+G-1
            row = ro.completion_ids[p * G + g].tolist()
            assert row == ref[p, : len(row)].tolist()
            # any tokens generate() produced beyond our length are padding (we stopped because all rows ended)
            assert all(t == PAD for t in ref[p, len(row) :].tolist())
    # The prompts' greedy completions differ, so grouping order really was checked.
    assert len({tuple(r) for r in ref.tolist()}) > 1


@pytest.mark.parametrize("backend", [GroupedBackend, GenericBackend])
def test_sampled_mask_and_padding(model, tok, backend):
    ids, mask = encode(tok, PROMPTS)
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(10, temperature=3.0)
    ro = sample_completions(
        model, ids, mask, 16, params, gen, eos_token_id=EOS, pad_token_id=PAD, backend=backend()
    )
    c, m = ro.completion_ids, ro.completion_mask
    assert c.shape == m.shape and c.size(0) == len(PROMPTS) * 16
    n_eos = 0
    for row, mrow, is_eos in zip(c.tolist(), m.tolist(), ro.is_eos.tolist(), strict=True):
        if EOS in row:
            k = row.index(EOS)
            n_eos += 1
            assert mrow == [1] * (k + 1) + [0] * (len(row) - k - 1)  # up to and including the first EOS
            assert all(t == PAD for t in row[k + 1 :])  # padding after EOS
            assert is_eos
        else:
            assert mrow == [1] * len(row) and not is_eos
            assert len(row) == 10  # a truncated row used the whole budget
    # at temperature 3 with 64 rows of 10 tokens, some rows end and some are truncated: both branches checked
    assert 0 < n_eos < c.size(0)


@pytest.mark.parametrize("backend", [GroupedBackend, GenericBackend])
def test_stops_when_all_rows_finished(model, tok, backend):
    # Declare as "EOS" the token every prompt emits first: every row finishes at step 1.
    ids, mask = encode(tok, PROMPTS)
    first = model(ids, attention_mask=mask).logits[:, -1].argmax(-1)
    fake_eos = int(first[0])
    prompts = [p for p, f in zip(PROMPTS, first.tolist(), strict=True) if f == fake_eos]
    ids, mask = encode(tok, prompts)
    greedy = SamplingParams.greedy(10)
    ro = sample_completions(
        model, ids, mask, 2, greedy, eos_token_id=fake_eos, pad_token_id=PAD, backend=backend()
    )
    assert ro.completion_ids.shape == (2 * len(prompts), 1)
    assert ro.is_eos.all() and ro.completion_mask.eq(1).all()


def test_seeded_sampling_is_reproducible(model, tok):
    ids, mask = encode(tok, PROMPTS)

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        params = SamplingParams(8, temperature=1.5)
        return sample_completions(
            model, ids, mask, 4, params, g, eos_token_id=EOS, pad_token_id=PAD
        ).completion_ids

    a, b, c = run(7), run(7), run(8)
    assert torch.equal(a, b)
    assert a.shape != c.shape or not torch.equal(a, c)


# ---------------------------------------------------------------- the repetition penalty


def penalised_decode(model, tok, prompts, G, params, penalty, gen, with_prompt=True) -> torch.Tensor:
    """Oracle: each row's next-token logits from a plain forward of its own unpadded prompt + completion so far (no
    cache, no padding), through transformers' RepetitionPenaltyLogitsProcessor on that history (`with_prompt`
    False: the completion's tokens only), then the plain sampler (penalty off) on the live rows together, one
    uniform a live row from `gen` (None: argmax), as the decode loop draws. (P*G, Tc) ids, pad after EOS."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    processor = RepetitionPenaltyLogitsProcessor(penalty)
    plain = dataclasses.replace(params, repetition_penalty=1.0)
    heads = [tok(prompts[r // G])["input_ids"] for r in range(len(prompts) * G)]
    out, live = [[] for _ in heads], list(range(len(heads)))
    for _ in range(params.max_completion_length):
        rows = []
        for r in live:
            logits = model(torch.tensor([heads[r] + out[r]]), use_cache=False).logits[:, -1]  # (1, V)
            history = (heads[r] if with_prompt else []) + out[r]
            rows.append(processor(torch.tensor([history]), logits.clone()) if history else logits)
        nxt = sample_from_logits(torch.cat(rows), plain, gen).tolist()
        for r, t in zip(live, nxt, strict=True):
            out[r].append(t)
        live = [r for r, t in zip(live, nxt, strict=True) if t != EOS]
        if not live:
            break
    width = max(len(row) for row in out)
    return torch.tensor([row + [PAD] * (width - len(row)) for row in out])


def _decoders():
    """Both decoding loops, each through its public entry point: the dynamic one (rows leave as they end) and the
    static-shape one (tinygrpo/rollout/static_decode.py); they share the penalty's set-up."""
    from tinygrpo.rollout.static_decode import sample_static

    return {
        "dynamic": lambda *a, **kw: sample_completions(*a, **kw, backend=GroupedBackend()),
        "static": lambda *a, **kw: sample_static(*a, **kw, backend=GroupedBackend()),
    }


@pytest.mark.parametrize("entry", ["dynamic", "static"])
def test_the_repetition_penalty_penalises_the_prompts_tokens_as_transformers_does(model64, tok, entry):
    """transformers' RepetitionPenaltyLogitsProcessor penalises every id in input_ids, which in generate holds the
    prompt: a token the prompt has is penalised from the first sampled token on, before the completion repeats it.
    The sampler, end to end, against that processor on each row's whole history; and the case is exercised: the
    same processor on the completion alone (a sampler that forgot the prompt) samples other tokens."""
    G, penalty, seed = 3, 4.0, 11
    params = SamplingParams(6, temperature=1.0, repetition_penalty=penalty)
    ids, mask = encode(tok, PROMPTS)
    gen = torch.Generator().manual_seed(seed)
    ours = _decoders()[entry](model64, ids, mask, G, params, gen, eos_token_id=EOS, pad_token_id=PAD)
    want = penalised_decode(model64, tok, PROMPTS, G, params, penalty, torch.Generator().manual_seed(seed))
    assert torch.equal(ours.completion_ids, want)
    forgot = penalised_decode(
        model64, tok, PROMPTS, G, params, penalty, torch.Generator().manual_seed(seed), with_prompt=False
    )
    # (the first tokens: only the prompt's can be penalised there)
    assert not torch.equal(forgot[:, :1], want[:, :1])


@pytest.mark.parametrize("entry", ["dynamic", "static"])
def test_greedy_decoding_ignores_the_repetition_penalty(model64, tok, entry):
    """repetition_penalty acts "before sampling" (its help; decode_setup builds no record of seen tokens at
    temperature 0), so greedy decoding, the held-out evaluation's, is plain argmax whatever the option says (unlike
    transformers' generate, whose greedy search applies it): the held-out accuracy measures the policy, not the
    penalty. The case is exercised: greedy on the penalised logits would choose other tokens."""
    T, penalty = 6, 4.0
    ids, mask = encode(tok, PROMPTS)
    decode = _decoders()[entry]
    plain = decode(model64, ids, mask, 1, SamplingParams.greedy(T), eos_token_id=EOS, pad_token_id=PAD)
    set_ = SamplingParams(T, temperature=0.0, repetition_penalty=penalty)
    penalised_option = decode(model64, ids, mask, 1, set_, eos_token_id=EOS, pad_token_id=PAD)
    assert torch.equal(penalised_option.completion_ids, plain.completion_ids)
    assert torch.equal(penalised_option.completion_mask, plain.completion_mask)
    argmax = penalised_decode(model64, tok, PROMPTS, 1, set_, 1.0, None)  # (penalty 1: plain argmax)
    assert torch.equal(argmax, plain.completion_ids)
    penalised = penalised_decode(model64, tok, PROMPTS, 1, set_, penalty, None)
    assert not torch.equal(penalised[:, :1], plain.completion_ids[:, :1])


def test_held_out_evaluation_is_greedy_without_the_penalty_its_sampling_settings_carry(model64, tok):
    """The trainer hands its sampling settings, penalty included, to the held-out evaluation; its greedy
    completions (eval/accuracy) are the same as with the penalty off: only pass@k's samples use the penalty."""
    from tinygrpo.rollout.evaluation import held_out_metrics

    ids, mask = encode(tok, PROMPTS)
    rows = {"prompt": PROMPTS, "answer": ["3", "85", "60", "9"]}
    with_penalty = SamplingParams(6, temperature=1.0, repetition_penalty=4.0)
    off = dataclasses.replace(with_penalty, repetition_penalty=1.0)
    a = held_out_metrics(model64, tok, ids, mask, rows, with_penalty)
    b = held_out_metrics(model64, tok, ids, mask, rows, off)
    assert a.completions == b.completions and a.metrics == b.metrics
    greedy = sample_completions(
        model64, ids, mask, 1, SamplingParams.greedy(6), eos_token_id=EOS, pad_token_id=PAD
    )
    assert a.completions == decode_completions(tok, greedy.completion_ids, greedy.completion_mask)


# ---------------------------------------------------------------- completion_logits


def full_forward_logits(model, tok, prompts, completion_ids, G):
    """Oracle: each row alone, unpadded prompt + completion in one plain forward (no cache, no mask)."""
    rows = []
    Tc = completion_ids.size(1)
    for r in range(completion_ids.size(0)):
        p = tok(prompts[r // G], return_tensors="pt")["input_ids"]
        x = torch.cat([p, completion_ids[r : r + 1, : Tc - 1]], 1) if Tc > 1 else p
        rows.append(model(x, use_cache=False).logits[:, p.size(1) - 1 :])
    return torch.cat(rows, 0)


# tiny_lm's fast path and the generic transformers forward
@pytest.mark.parametrize("backend", [GroupedBackend, GenericBackend])
@pytest.mark.parametrize(
    "P, G, Tc",
    [
        (4, 3, 6),  # the general case: padded prompts, shared cache repeated G times
        (4, 1, 5),  # G = 1: no repeat
        (2, 2, 1),  # a one-token completion: only the prompt forward is used
    ],
)
def test_completion_logits_match_full_forward(model64, tok, P, G, Tc, backend):
    # Two orders of the same sums: compared in float64 (tests/_numerics.py).
    model = model64
    prompts = PROMPTS[:P]
    ids, mask = encode(tok, prompts)
    g = torch.Generator().manual_seed(P * 100 + G * 10 + Tc)
    comp = torch.randint(0, 14, (P * G, Tc), generator=g)  # any tokens, EOS and pad included
    model.train()  # gradients as in training; dropout is 0
    try:
        got = completion_logits(model, ids, mask, comp, G, backend=backend())
        want = full_forward_logits(model, tok, prompts, comp, G)
        assert got.shape == want.shape == (P * G, Tc, 14)
        assert_same_math(got, want)

        w = torch.randn(got.shape, generator=g, dtype=torch.float64)
        params = [p for p in model.parameters() if p.requires_grad]
        grads_got = torch.autograd.grad((got * w).sum(), params)
        grads_want = torch.autograd.grad((want * w).sum(), params)
        for a, b in zip(grads_got, grads_want, strict=True):
            assert_same_math(a, b)
    finally:
        model.eval()


# ---------------------------------------------------------------- sample_from_logits

LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5, -3.0])
N_DRAWS = 50_000
CHI2_CRIT = 25.0  # chi-square, 5 degrees of freedom: P(X > 20.5) = 0.001; 25 leaves extra room


def sampler(**kw) -> SamplingParams:
    """The sampler's settings (max_completion_length is the decoding loop's, unused by one draw)."""
    return SamplingParams(1, **kw)


def draw(temperature=1.0, top_k=0, top_p=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    params = sampler(temperature=temperature, top_k=top_k, top_p=top_p)
    out = sample_from_logits(LOGITS.expand(N_DRAWS, -1), params, g)
    return torch.bincount(out, minlength=LOGITS.numel()).double()


def chi2(counts, probs):
    keep = probs > 0
    assert counts[~keep].sum() == 0  # never draw a token of probability 0
    exp = probs[keep] * counts.sum()
    return float(((counts[keep] - exp) ** 2 / exp).sum())


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])  # plain softmax, sharpened, flattened
def test_sampler_matches_softmax(temperature):
    probs = torch.softmax(LOGITS.double() / temperature, -1)
    counts = draw(temperature)
    assert chi2(counts, probs) < CHI2_CRIT


@pytest.mark.parametrize(
    "top_k, top_p, kept",
    [
        (2, 1.0, [0, 1]),  # the two largest logits
        (3, 1.0, [0, 1, 4]),  # logit order is 2, 1, 0.5, ...
        (0, 0.6, [0, 1]),  # p(0) ~ 0.50 < 0.6, p(0)+p(1) ~ 0.69 >= 0.6: smallest set reaching top_p
        (0, 0.3, [0]),  # p(0) alone reaches 0.3
    ],
)
def test_sampler_truncation(top_k, top_p, kept):
    base = torch.softmax(LOGITS.double(), -1)
    probs = torch.zeros_like(base)
    probs[kept] = base[kept] / base[kept].sum()
    counts = draw(top_k=top_k, top_p=top_p)
    assert chi2(counts, probs) < CHI2_CRIT


@pytest.mark.parametrize(
    "top_p, n_kept",
    [
        (0.5, 2),  # four tokens of exactly 0.25: two reach 0.5 exactly, so the third must be dropped
        (0.51, 3),  # just above the boundary a third token is needed
        (1.0, 4),  # no truncation
    ],
)
def test_top_p_boundary(top_p, n_kept):
    # One row at a time: which of the tied tokens are kept may differ between rows of a batch, not their number.
    g = torch.Generator().manual_seed(0)
    params = sampler(top_p=top_p)
    seen = {int(sample_from_logits(torch.zeros(1, 4), params, g)) for _ in range(300)}
    assert len(seen) == n_kept


def test_top_k_1_and_tiny_top_p_are_argmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(500, 14, generator=g) * 3
    argmax = logits.argmax(-1)
    assert torch.equal(sample_from_logits(logits, sampler(top_k=1), g), argmax)
    assert torch.equal(sample_from_logits(logits, sampler(top_p=1e-6), g), argmax)
    greedy = SamplingParams.greedy(1)  # temperature 0
    assert torch.equal(sample_from_logits(logits, greedy), argmax)


@pytest.mark.parametrize(
    "bad",
    [
        {"max_completion_length": -1},
        {"temperature": -0.5},
        {"temperature": float("nan")},
        {"top_k": -1},
        {"top_p": 0.0},  # nothing would be kept
        {"top_p": 1.5},
    ],
)
def test_sampling_params_reject_settings_out_of_range(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        SamplingParams(**{"max_completion_length": 4, **bad})


def test_sampler_generator_reproducible():
    logits = torch.zeros(1000, 14)
    a = sample_from_logits(logits, sampler(), torch.Generator().manual_seed(3))
    b = sample_from_logits(logits, sampler(), torch.Generator().manual_seed(3))
    c = sample_from_logits(logits, sampler(), torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


# ---------------------------------------------------------------- decode_completions


def test_decode_completions(tok):
    c = torch.tensor(
        [
            [10, 7, 1, 0, 0],  # "85<eos>" then padding
            [3, 4, 5, 6, 7],  # truncated: no <eos>
            [2, 1, 9, 9, 9],  # junk after EOS is masked out, even when it is not the pad id
            [1, 0, 0, 0, 0],  # empty answer
        ]
    )
    m = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    assert decode_completions(tok, c, m) == ["85<eos>", "12345", "0<eos>", "<eos>"]
    # With a cache: the same texts, computed once per distinct row and reused the second time.
    cache: dict = {}
    assert decode_completions(tok, c, m, cache) == ["85<eos>", "12345", "0<eos>", "<eos>"]
    assert len(cache) == 4 and cache[(10, 7, 1)] == "85<eos>"
    cache[(10, 7, 1)] = "from the cache"
    assert decode_completions(tok, c, m, cache)[0] == "from the cache"


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.integers(0, 13), max_size=6), max_size=8), cached=st.booleans())
def test_decode_rows_drops_every_pad_wherever_it_is(tok, rows, cached):
    """Rows with the pad id anywhere (a cut row has none, a tool's row may): each row's text is the tokenizer's own
    decoding of its other ids, with a cache or without, on a first call and on a second from the cache."""
    want = [tok.decode([t for t in row if t != tok.pad_token_id], skip_special_tokens=False) for row in rows]
    cache = {} if cached else None
    assert decode_rows(tok, rows, cache) == want
    assert decode_rows(tok, rows, cache) == want


def _random_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=14,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        eos_token_id=EOS,
        pad_token_id=PAD,
        bos_token_id=EOS,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        initializer_range=0.3,
    )
    return GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("checkpointing", [False, True])
def test_generic_backend_runs_a_plain_transformers_model(tok, checkpointing):
    """Any transformers causal LM runs on the generic backend (a random GPT-2 here), left-padded prompts included:
    each row's completion logits equal a plain forward over its prompt alone (no padding) + its completion, with or
    without activation checkpointing (another code path), and greedy samples equal generate(). GPT-2's forward
    numbers positions from the first column, pads included, unless given position ids: the backend passes them."""
    gpt2 = _random_gpt2().double()  # two orders of the same sums: float64 (tests/_numerics.py)
    assert isinstance(select_backend(gpt2), GenericBackend)
    ids, mask = encode(tok, PROMPTS)
    assert not bool(mask.all())  # left padding
    G, Tc = 2, 4
    comp = torch.randint(2, 14, (len(PROMPTS) * G, Tc), generator=torch.Generator().manual_seed(1))
    if checkpointing:
        (getattr(gpt2, "activation_checkpointing_enable", None) or gpt2.gradient_checkpointing_enable)()
        gpt2.train()  # checkpointing runs in training mode only; no dropout in this config
    with torch.enable_grad():
        got = completion_logits(gpt2, ids, mask, comp, G)
    gpt2.eval()
    for r in range(len(PROMPTS) * G):
        alone = ids[r // G][mask[r // G].bool()]  # the prompt without its padding
        want = gpt2(torch.cat([alone, comp[r, :-1]])[None]).logits[0, alone.numel() - 1 :]
        assert_same_math(got[r], want)
    ro = sample_completions(gpt2, ids, mask, 1, SamplingParams.greedy(6), eos_token_id=EOS, pad_token_id=PAD)
    ref = gpt2.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=6,
        do_sample=False,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )[:, ids.size(1) :]
    assert ro.completion_ids.size(1) > 1  # some row kept decoding after its first token
    for row, want_row in zip(ro.completion_ids.tolist(), ref.tolist(), strict=True):
        assert row == want_row[: len(row)] and all(t == PAD for t in want_row[len(row) :])
