"""The decoder of fixed buffers (tiny_lm/static_decoder.py), the CPU twin of a CUDA-graphed decode step: its logits
are GroupedDecoder's step for step (float64); a step is idempotent, as capturing needs; a decode through a capture
(here a CPU stand-in that records each step once and replays it) gives today's completions, capturing each step
index once across rollouts; one decoder per shape is kept; a run with `cuda_graphs` is refused off CUDA."""

from __future__ import annotations

import pytest
import torch
from _capture import TracedCapture
from test_static_decode import _both, _same
from test_tool_calls import _model, tok  # noqa: F401  (tok: the module's fixture)

from tiny_lm.grouped import GroupedDecoder
from tiny_lm.static_decoder import StaticGroupedDecoder
from tinygrpo.model.backend import GroupedBackend
from tinygrpo.model.static_shapes import pad_to_buckets
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.static_decode import sample_static

PROMPTS = ["12*34=", "7*8=", "3=", "99*99=", "5*6=7"]


def _prompts(tok, texts=PROMPTS):  # noqa: F811
    enc = tok(texts, padding=True, return_tensors="pt")
    return pad_to_buckets(enc["input_ids"], enc["attention_mask"], tok.pad_token_id)


def test_its_logits_are_the_grouped_decoders_step_for_step(tok):  # noqa: F811
    model = _model(tok, 5).double()
    w = model.grouped_weights()
    ids, mask = _prompts(tok)
    G, T = 3, 6
    eager = GroupedDecoder(w, ids, mask, G)
    static = StaticGroupedDecoder(w, *ids.shape, G, T)
    static.prefill(ids, mask)
    torch.testing.assert_close(
        static.logits, eager.logits, rtol=0, atol=0
    )  # (the prefill is eager's, copied)
    g = torch.Generator().manual_seed(0)
    for _ in range(T):
        tokens = torch.randint(2, len(tok), (ids.size(0) * G,), generator=g)
        want = eager.step(tokens)
        # the same ops on the same shapes, plus a zero bias where a prompt has no padding: float64 rounding at most
        torch.testing.assert_close(static.step(tokens), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="step 7 of a decoder built for 6"):
        static.step(tokens)


def test_a_step_is_idempotent(tok):  # noqa: F811
    """What a capture needs: a warm-up run and the captured run leave the state one run leaves."""
    model = _model(tok, 6)
    ids, mask = _prompts(tok)
    dec = StaticGroupedDecoder(model.grouped_weights(), *ids.shape, 2, 4)
    dec.prefill(ids, mask)
    states = []
    for _ in range(3):
        with torch.inference_mode():
            dec.tokens.copy_(torch.arange(dec.tokens.numel()) % 10 + 2)
            dec.compute(1)
        states.append([t.clone() for t in (dec.logits, *dec.kc, *dec.vc)])
    assert all(torch.equal(a, b) for s in states[1:] for a, b in zip(states[0], s, strict=True))
    assert dec.kc[0][:, :, 1].abs().sum() > 0 and dec.kc[0][:, :, 2].abs().sum() == 0  # column 1 only


@pytest.mark.parametrize(
    "params",
    [SamplingParams(5, temperature=1.0), SamplingParams(5, 0.8, top_p=0.9), SamplingParams.greedy(5)],
)
def test_a_captured_decode_samples_todays_completions(tok, params):  # noqa: F811
    model = _model(tok, 1).double()
    capture, backend = TracedCapture(), GroupedBackend()
    for rollout in range(2):  # two rollouts of one shape: the second replays what the first captured
        if rollout == 1:  # an update in place between them, as the optimizer makes: the replays read it
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.05 * torch.randn_like(p))
        (today, state), (captured, captured_state) = _both(
            model, PROMPTS, 4, params, tok, backend, capture=capture, seed=rollout
        )
        _same(today, captured)
        assert torch.equal(captured_state, state)
    # the whole loop (T = 5 steps: sampling, bookkeeping, the model) once, in the first rollout; one replay a rollout
    assert capture.captured == 1
    assert capture.replayed == 2
    assert len(backend._static) == 1  # one decoder for the shape, kept


def test_the_backend_keeps_one_decoder_per_shape_and_model(tok):  # noqa: F811
    be = GroupedBackend()
    a, b = _model(tok, 1), _model(tok, 2)
    ids, mask = _prompts(tok)
    first = be.static_decoder(a, ids, mask, 2, 4)
    assert be.static_decoder(a, ids, mask, 2, 4) is first
    assert be.static_decoder(b, ids, mask, 2, 4) is not first  # another model's weights
    assert be.static_decoder(a, ids, mask, 4, 4) is not first  # another shape
    # a context too short for the bucket's width and steps: none (GroupedDecoder's own check then serves)
    assert be.static_decoder(a, ids, mask, 2, a.config.n_positions) is None


def test_cuda_graphs_where_they_cannot_run_is_one_error_line(seed_reference, tmp_path, capsys):
    import train_grpo

    common = [
        "--model_name_or_path",
        seed_reference,
        "--dataset_name",
        "seed_bank",
        "--dataset_test_split",
        "none",
    ]
    for extra, want in (
        (["--cuda_graphs", "true"], "error: cuda_graphs needs a CUDA device; this run is on cpu"),
        (
            ["--cuda_graphs", "true", "--static_shapes", "false"],
            "error: cuda_graphs replays the static-shape",
        ),
        # where the decode would not be the grouped float32 one, and so would run uncaptured, saying nothing
        (["--cuda_graphs", "true", "--bf16", "true"], "float32 decode; bf16 autocasts it: set one of them"),
        (
            ["--cuda_graphs", "true", "--grouped_forward", "false"],
            "grouped_forward false turns that path off",
        ),
        # the seed bank's prompts (at most 4 tokens) pad to 8; with 9 more the reference's 16 positions are passed
        (
            ["--cuda_graphs", "true", "--max_completion_length", "9"],
            "error: cuda_graphs: train prompts of up to 4 tokens are padded to 8, and with max_completion_length=9",
        ),
    ):
        out = tmp_path / "_".join(extra).replace("-", "")
        assert train_grpo.main([*common, "--output_dir", str(out), *extra]) != 0
        err = capsys.readouterr().err
        assert want in err and err.count("error:") == 1, err
        assert not (out / "metrics.jsonl").exists()  # refused before any work


def test_one_capture_serves_every_batch_of_its_bucket(tok):  # noqa: F811
    """5, 7 and 6 prompts all pad to a bucket of 8: one decoder, one captured loop, each batch's completions today's
    (how many rows are real is a buffer, not a constant of the graphs)."""
    model = _model(tok, 2).double()
    capture, backend = TracedCapture(), GroupedBackend()
    params = SamplingParams(4, temperature=1.3)
    for n, seed in ((5, 0), (7, 1), (6, 2)):
        prompts = [f"{i}*{i + 3}=" for i in range(n)]
        (today, state), (captured, captured_state) = _both(
            model, prompts, 3, params, tok, backend, capture=capture, seed=seed
        )
        assert captured.completion_ids.shape[0] == 3 * n
        _same(today, captured)
        assert torch.equal(captured_state, state)
    assert capture.captured == 1 and len(backend._static) == 1


def test_a_decoder_the_backend_drops_lets_go_of_its_graphs(tok):  # noqa: F811
    """A captured graph refers back to its decoder: a dropped decoder releases them (else they would wait for the
    cycle collector with its buffers)."""
    model, be = _model(tok, 1), GroupedBackend()
    ids, mask = _prompts(tok)
    params = SamplingParams(3, 1.0)
    sample_static(
        model,
        *_prompts(tok),
        2,
        params,
        torch.Generator().manual_seed(0),
        eos_token_id=1,
        pad_token_id=0,
        backend=be,
        capture=TracedCapture(),
    )
    first = be.static_decoder(model, ids, mask, 2, 3, TracedCapture())
    assert first.loops  # (the rollout captured its loop on this decoder)
    for G in range(3, 19):  # 16 more shapes: the cache of 16 is cleared
        be.static_decoder(model, ids, mask, G, 3)
    assert not first.loops and not first.replays
