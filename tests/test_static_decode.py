"""The static-shape decode (tinygrpo/rollout/static_decode.py), the CPU twin of a graphed GPU decode: the same
completions, environment tokens and generator state as today's decode, in float64, on both backends, with and
without tools; no host read per decode step (counted); the buckets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from _capture import TracedCapture, TracedTraining
from test_tool_calls import CALC, _model, tok  # noqa: F401  (tok: the module's fixture)

from benchmarks._host_reads import HostReads
from tinygrpo.model.backend import GenericBackend, GroupedBackend
from tinygrpo.model.static_shapes import CapturedScoring, bucket_size, pad_to_buckets
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.sampling import sample_completions
from tinygrpo.rollout.static_decode import sample_static
from tinygrpo.rollout.tool_calls import ToolUse

BACKENDS = {"grouped": GroupedBackend, "generic": GenericBackend}


@pytest.mark.parametrize("n", [*range(1, 70), 127, 128, 129, 1000, 4096, 4097])
def test_a_bucket_is_the_least_power_of_two_multiple_of_eight_that_holds_n(n):
    size = bucket_size(n)
    k = size // 8
    assert size >= n and size % 8 == 0 and k & (k - 1) == 0  # 8 x 2^j
    assert size == 8 or size // 2 < n  # the least: half of it does not hold n
    # a few shapes: every n up to 4096 falls in one of 10 buckets
    assert len({bucket_size(m) for m in range(1, 4097)}) == 10


def test_padding_to_buckets_keeps_each_prompt_right_aligned_and_adds_masked_width_and_extra_rows():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    pids, pmask = pad_to_buckets(ids, mask, pad_token_id=0)
    assert pids.shape == pmask.shape == (8, 8)
    assert torch.equal(pids[:2, -3:], ids) and torch.equal(pmask[:2, -3:], mask)
    assert not pmask[:, :-3].any()  # the extra width is padding
    assert torch.equal(pids[2:, -3:], ids[:1].expand(6, 3))  # the extra rows: copies of the first prompt


def _both(model, prompts, G, params, tok, backend, tools=None, capture=None, seed=11):  # noqa: F811
    """today's decode and the static one (through `capture`, if given), each from a fresh generator of `seed`: their
    rollouts and the generator's state after each. `backend`: a name (a fresh one of it for each), or the backend
    the static decode keeps across calls (today's gets a fresh one of its kind)."""
    enc = tok(prompts, padding=True, return_tensors="pt")
    kept = None if isinstance(backend, str) else backend
    fresh = BACKENDS[backend] if kept is None else type(kept)
    out = []
    for static in (False, True):
        gen = torch.Generator().manual_seed(seed)
        kw = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tools=tools)
        args = (model, enc["input_ids"], enc["attention_mask"], G, params, gen)
        if static:
            ro = sample_static(*args, **kw, backend=kept if kept is not None else fresh(), capture=capture)
        else:
            ro = sample_completions(*args, **kw, backend=fresh())
        out.append((ro, gen.get_state()))
    return out


def _same(a, b) -> None:
    for f in ("completion_ids", "completion_mask", "is_eos", "tool_mask", "tool_calls", "tool_failures"):
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None and y is None) or torch.equal(x, y), f


@pytest.mark.parametrize("backend", ["grouped", "generic"])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(12, temperature=1.0),
        SamplingParams(12, temperature=1.7, top_k=5),
        SamplingParams(12, temperature=0.8, top_p=0.9, min_p=0.05),
        SamplingParams(12, temperature=1.2, repetition_penalty=1.4),
        SamplingParams.greedy(12),
    ],
)
@pytest.mark.parametrize("captured", [False, True], ids=["eager", "captured"])
def test_the_static_decode_samples_todays_completions_and_leaves_the_generator_as_today(
    tok,  # noqa: F811
    backend,
    params,
    captured,
):
    """`captured`: through a capture (TracedCapture, tests/_capture.py: the CPU twin of CUDA graphs): with the grouped backend, each whole step
    of the loop (tinygrpo/rollout/static_decode.py, CapturedLoop), or the model's step alone with a repetition
    penalty; the generic backend has no decoder of fixed buffers, and decodes as without."""
    model = _model(tok, 1).double()
    prompts = ["12*34=", "7*8=", "3=", "99*99=", "5*6=7"]  # 5 prompts of 3 widths: both buckets pad
    replay = TracedCapture() if captured else None
    if (
        captured
    ):  # (6 steps, not 12: the trace costs a second per 5 steps on the CPU, and 6 show every branch)
        params = dataclasses.replace(params, max_completion_length=6)
    (eager, state_e), (static, state_s) = _both(model, prompts, 6, params, tok, backend, capture=replay)
    _same(eager, static)
    assert torch.equal(state_e, state_s)  # the next draw is the same: the training run goes on as today
    if captured and backend == "grouped":  # (it did capture: the 6-step loop as one, or 5 model steps)
        assert replay.captured == (5 if params.repetition_penalty != 1 else 1)
    assert eager.completion_ids.size(0) == 30
    assert int(eager.is_eos.sum()) > 0 or params.temperature == 0  # (some rows end early: rows do finish)


@pytest.mark.parametrize("backend", ["grouped", "generic"])
def test_the_static_decode_with_tools_feeds_the_same_replies(tok, backend):  # noqa: F811
    model = _model(tok, 0).double()
    use = ToolUse(CALC, tok, max_calls=3)
    params = SamplingParams(14, 1.5)
    replay = (
        TracedCapture()
    )  # (with tools, the model's step alone is captured: the environment answers on the host)
    (eager, state_e), (static, state_s) = _both(
        model, ["12*34=", "7*8="], 64, params, tok, backend, tools=use, capture=replay
    )
    assert int(eager.tool_calls.sum()) > 0  # (the random policy calls the tool: the test can tell)
    _same(eager, static)
    assert torch.equal(state_e, state_s)
    assert replay.captured == (13 if backend == "grouped" else 0)


def _reads(tok, backend: str, steps: int, static: bool, capture=None) -> int:  # noqa: F811
    model = _model(tok, 2)
    enc = tok(["12*34=", "7*8=", "3*3="], padding=True, return_tensors="pt")
    be = BACKENDS[backend]()
    params = SamplingParams(steps, 1.0)
    args = (model, enc["input_ids"], enc["attention_mask"], 8, params, torch.Generator().manual_seed(0))
    # (a prompt that never emits <eos> early: every run decodes all its steps)
    kw = dict(
        eos_token_id=-1, pad_token_id=tok.pad_token_id, backend=be
    )  # (-1: no row ends, every step runs)
    with HostReads() as reads:
        if static:
            sample_static(*args, **kw, capture=capture)
        else:
            assert capture is None
            sample_completions(*args, **kw)
    return reads.count


def test_the_static_decode_reads_nothing_back_per_step(tok):  # noqa: F811
    """The grouped fast path (the GPU's): nothing read back per step. (transformers' own forward, the generic
    backend's, reads its attention mask each step, how often depending on its version: its reads, not the loop's.)"""
    short, long = (_reads(tok, "grouped", steps, static=True) for steps in (3, 9))
    assert short == long  # what it reads back is per rollout, not per step (prefill and the end)
    short, long = (_reads(tok, "grouped", steps, static=True, capture=TracedCapture()) for steps in (3, 6))
    assert (
        short == long
    )  # and the captured loop's steps, sampling and bookkeeping included, read nothing back
    eager_short, eager_long = (_reads(tok, "grouped", steps, static=False) for steps in (3, 9))
    assert eager_long - eager_short >= 6  # today's: at least one a step (the counter sees them)


def test_a_run_with_static_shapes_trains_as_today(seed_reference, tmp_path, monkeypatch):
    """Two steps of a run (float64, explore rounds on: several rounds and temperatures a step): the same completions,
    so the same rewards; the same losses and weights up to float64 rounding (the scoring forward runs on padded
    shapes too, its sums longer by masked zeros: tinygrpo/model/static_shapes.py). And the same run with
    `cuda_graphs` as a CPU can run it: CudaGraphs replaced by TracedCapture and make_graphed_callables by
    TracedTraining (tests/_capture.py), and the device check, which refuses it off CUDA, told nothing of the device:
    the decode's loops, the scoring forwards and the update's forward and backward are captured once and replayed
    across steps, rounds and updates, with the static run's results."""
    from _runs import run_inproc
    from safetensors.torch import load_file

    import tiny_lm.static_decoder as static_decoder
    import tinygrpo.run.trainer as trainer
    from tinygrpo.run.logs import read_jsonl

    common = [
        *"--dataset_test_split none --num_generations 4 --per_device_train_batch_size 40 --max_completion_length 3".split(),
        *"--max_steps 2 --logging_steps 1 --save_steps 0 --dtype float64 --explore_rounds 2".split(),
        *"--beta 0.04".split(),  # (a reference forward a step: the scoring a step replays)
    ]
    captures: list[TracedCapture] = []
    monkeypatch.setattr(
        static_decoder, "CudaGraphs", lambda: captures.append(TracedCapture()) or captures[-1]
    )
    training = TracedTraining()
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", training)
    check = trainer.check_inputs
    monkeypatch.setattr(trainer, "check_inputs", lambda *args: check(*args[:-1], None))  # (no device)
    variants = {
        "today": ["--static_shapes", "false"],
        "static": ["--static_shapes", "true"],
        "graphed": ["--static_shapes", "true", "--cuda_graphs", "true"],
    }
    rows, weights = {}, {}
    for name, extra in variants.items():
        out = tmp_path / name
        assert run_inproc(seed_reference, out, *common, *extra) == 0
        rows[name] = [
            {k: v for k, v in r.items() if not k.startswith(("time/", "throughput/"))}
            for r in read_jsonl(out / "metrics.jsonl")
        ]
        weights[name] = load_file(str(out / "final" / "model.safetensors"))
    (graphs,) = captures  # one capture (one memory pool and stream on a GPU) for the decode and the scoring
    assert 0 < graphs.captured < graphs.replayed  # (captured once per shape, replayed across the steps)
    assert {name.split(".")[0] for name in graphs.names} == {"CapturedLoop", "CapturedScoring"}, graphs.names
    assert 0 < training.graphed < training.calls  # the policy's forward and backward in the update
    for name in ("static", "graphed"):
        assert len(rows[name]) == len(rows["today"]) == 3
        for static_row, row in zip(rows[name], rows["today"], strict=True):
            assert static_row.keys() == row.keys()
            for key, value in row.items():
                if isinstance(
                    value, float
                ):  # float64 sums in another order: ~1e-16 relative, 1e-9 with margin
                    assert static_row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, key)
                else:  # counts, steps, the completions' statistics: equal
                    assert static_row[key] == value, (name, key)
        for key, w in weights["today"].items():
            torch.testing.assert_close(weights[name][key], w, rtol=1e-9, atol=1e-12, msg=(name, key))
    assert rows["static"][-1]["loss"] != 0  # (a step that trained: the comparison has something to compare)
    assert any(
        not torch.equal(w, load_file(str(Path(seed_reference) / "model.safetensors"))[n])
        for n, w in weights["today"].items()
    )


def test_the_benchmarks_graphed_ways_decode_and_score_as_today(tok, monkeypatch, capsys):  # noqa: F811
    """benchmarks/static_decode.py's CUDA-only ways (the graphed decode, scoring, and forward and backward), run on
    the CPU through TracedCapture and TracedTraining: the code gpu.sh runs on a GPU, checked here for what a CPU can
    check."""
    from benchmarks import static_decode as bench

    capture, training = TracedCapture(), TracedTraining()
    monkeypatch.setattr(bench, "BACKENDS", {"graphs": capture})
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", training)
    model = _model(tok, 1).double()
    enc = tok(["12+34=", "7+8=", "3+3="], padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    for seed in (0, 1):  # the second rollout and scoring replay the first's captures
        today = bench.rollout(model, tok, ids, mask, 4, 5, False, seed)
        graphed = bench.rollout(model, tok, ids, mask, 4, 5, True, seed, graphed=True)
        _same(today, graphed)
        want = bench.score(model, ids, mask, 4, today, False)
        torch.testing.assert_close(
            bench.score(model, ids, mask, 4, today, True, True), want, rtol=1e-10, atol=1e-10
        )
        grads = bench.train(model, ids, mask, 4, today, True)
        for got, want in zip(grads, bench.train(model, ids, mask, 4, today, False), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    # the loop and the scoring forward captured once each; every call replays (the first just after capturing)
    assert capture.captured == 2 and capture.replayed == 4
    # the forward and backward: graphed once, called twice
    assert (training.graphed, training.calls) == (1, 2)
    diff, scale = bench.graphed_grad_diff(model, ids, mask, 4, today)  # (what the script prints on a GPU)
    assert diff <= 1e-10 * scale and scale > 0
    # a capture that fails (as a GPU may refuse one): said in one line, the shape noted, the other ways go on
    monkeypatch.setattr(bench, "FAILED", [])
    assert bench.graphs_work(model, tok, ids, mask, 4, 5, today)

    def refuse(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(bench, "BACKENDS", {"graphs": refuse})
    assert not bench.graphs_work(model, tok, ids, mask, 4, 5, today)
    assert bench.FAILED == ["3 x 4, 5"]
    err = capsys.readouterr().err
    assert "error: CUDA graphs failed at 3 x 4, 5: RuntimeError: operation not permitted" in err


@pytest.mark.parametrize(
    "captured", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "captured"]
)  # (captured: the trace of CapturedLoop, a few seconds on the CPU)
def test_when_every_row_ends_early_the_rollout_is_as_wide_as_its_longest_completion(tok, captured):  # noqa: F811
    """The static loop runs all max_completion_length steps (its shapes may not depend on where rows end), but the
    rollout it returns is only as wide as its longest completion: a wider one would send every later forward (the
    scoring, the loss) over columns of padding. Greedy, with <eos> taken to be a token every row writes within its
    first few steps, as found by an independent decode (transformers' own forward, the generic backend) in which no
    row ends; greedy, a row's tokens before its <eos> do not depend on which token ends it."""
    model = _model(tok, 4).double()
    prompts = ["12*34=", "7*8=", "3=", "99*99=", "5*6=7"]
    T = 6
    params = SamplingParams.greedy(T)
    enc = tok(prompts, padding=True, return_tensors="pt")
    args = (model, enc["input_ids"], enc["attention_mask"], 2, params)
    full = sample_completions(*args, eos_token_id=-1, pad_token_id=tok.pad_token_id, backend=GenericBackend())
    ids = full.completion_ids  # (10, T): no row ended
    assert ids.shape == (10, T)
    # the token whose latest first appearance over the rows is earliest: every row writes it by step `last`
    first = {v: [row.index(v) if v in row else T for row in ids.tolist()] for v in range(2, len(tok))}
    eos = min(first, key=lambda v: max(first[v]))
    last = max(first[eos])
    assert last + 1 <= T - 2  # the case is the interesting one: every row ends well before T
    assert len({*first[eos]}) > 1  # (and not all at the same step)
    # each row as it would end at its first `eos`, then padding; the rollout as wide as its longest row
    cols = torch.arange(last + 1)
    ends = torch.tensor(first[eos])[:, None]
    want = torch.where(cols <= ends, ids[:, : last + 1], tok.pad_token_id)
    backend, capture = GroupedBackend(), TracedCapture() if captured else None
    static = sample_static(
        *args,
        None,
        eos_token_id=eos,
        pad_token_id=tok.pad_token_id,
        backend=backend,
        capture=capture,
    )
    assert static.completion_ids.shape == (10, last + 1)  # not (10, T)
    assert torch.equal(static.completion_ids, want)
    assert bool(static.is_eos.all())
    if captured:
        assert capture.captured == 1  # (the whole loop, CapturedLoop: its own count of the width)


class _PassThrough:
    """A `Capture` that replays by calling fn again (what a graph's replay does, without tracing): counts captures."""

    def __init__(self) -> None:
        self.captured = 0

    def __call__(self, fn):
        self.captured += 1
        return fn


def test_the_per_shape_captures_hold_exactly_maxsize_dropping_the_oldest(tok):  # noqa: F811
    """CapturedScoring keeps one capture per model and layout shape, at most `maxsize` of them (on a GPU each holds a
    graph and its memory): three shapes through a cache of two leave exactly two, the last two, which serve their
    shapes again without a new capture, while the first, dropped, is captured anew. Each result is the eager
    forward's, whichever entry served it. (Two drops only: each runs the cycle collector, ~0.3 s in a test process.)"""
    model = _model(tok, 3).double()
    inner, capture = GroupedBackend(), _PassThrough()
    scoring = CapturedScoring(inner, capture, maxsize=2)
    enc = tok(["12*34=", "7*8="], padding=True, return_tensors="pt")
    g = torch.Generator().manual_seed(0)
    layouts = {  # three shapes: completions 1, 2 and 3 tokens wide
        Tc: inner.layout(
            model, enc["input_ids"], enc["attention_mask"], torch.randint(2, 12, (4, Tc), generator=g), 2
        )
        for Tc in (1, 2, 3)
    }

    def score(Tc: int) -> None:
        with torch.inference_mode():
            got = scoring.logits(model, layouts[Tc])
        assert torch.equal(got, inner.logits(model, layouts[Tc])), Tc

    for Tc in (1, 2, 3):
        score(Tc)
    assert capture.captured == 3 and len(scoring.graphs.entries) == 2  # exactly maxsize, not maxsize + 1
    for Tc in (3, 2):  # the last two are held: no new capture
        score(Tc)
    assert capture.captured == 3
    score(1)  # the first was dropped: captured again, and the cache still holds two
    assert capture.captured == 4 and len(scoring.graphs.entries) == 2
