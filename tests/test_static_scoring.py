"""The static-shape scoring forward (tinygrpo/model/static_shapes.py), the CPU twin of a graphed GPU scoring forward:
the same per-token log-probs and gradients as today's forward, in float64, on both backends, for batches of many
sizes; and the shapes the model is fed come from a few buckets whatever the batch."""

from __future__ import annotations

import pytest
import torch
from _capture import TracedCapture, TracedTraining
from test_tool_calls import _model, tok  # noqa: F401  (tok: the module's fixture)

from tinygrpo.algorithm.core import selective_log_softmax
from tinygrpo.model.backend import GenericBackend, GroupedBackend
from tinygrpo.model.static_shapes import StaticShapeBackend, bucket_size, replayed

BACKENDS = {"grouped": GroupedBackend, "generic": GenericBackend}


def _batch(tok, P: int, G: int, Tc: int, seed: int):  # noqa: F811
    """P prompts of mixed widths, G completions each of Tc tokens: random tokens, each row ending (EOS, then pads)
    at a random place, some never."""
    g = torch.Generator().manual_seed(seed)
    texts = [
        "".join(str(int(d)) for d in torch.randint(0, 10, (int(n),), generator=g)) + "+1="
        for n in torch.randint(1, 6, (P,), generator=g)
    ]
    enc = tok(texts, padding=True, return_tensors="pt")
    ids = torch.randint(2, len(tok), (P * G, Tc), generator=g)
    ends = torch.randint(0, Tc + 1, (P * G,), generator=g)  # (Tc: never ends)
    cols = torch.arange(Tc)
    ids = torch.where(cols == ends[:, None], tok.eos_token_id, ids)
    ids = torch.where(cols > ends[:, None], tok.pad_token_id, ids)
    mask = (cols <= ends[:, None]).double()
    return enc["input_ids"], enc["attention_mask"], ids, mask


def _logp(model, backend, batch, G):
    prompt_ids, prompt_mask, ids, mask = batch
    layout = backend.layout(model, prompt_ids, prompt_mask, ids, G, mask)
    return selective_log_softmax(backend.logits(model, layout), ids) * mask


@pytest.mark.parametrize("backend", ["grouped", "generic"])
@pytest.mark.parametrize(("P", "G", "Tc"), [(1, 1, 1), (3, 4, 5), (5, 6, 9), (9, 2, 12), (16, 8, 4)])
def test_static_scoring_gives_todays_log_probs_and_gradients(tok, backend, P, G, Tc):  # noqa: F811
    model = _model(tok, 3).double()
    batch = _batch(tok, P, G, Tc, seed=P * 100 + Tc)
    mask = batch[3]
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = []
    for be in (BACKENDS[backend](), StaticShapeBackend(BACKENDS[backend](), max_width=12)):
        model.zero_grad()
        logp = _logp(model, be, batch, G)
        (logp * weights).sum().backward()
        results.append((logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (today, grads), (static, static_grads) = results
    assert static.shape == today.shape == mask.shape
    # float64: a pad changes a sum's length and order, never a term; ~1e-16 relative, so 1e-10 holds with margin
    torch.testing.assert_close(static, today, rtol=1e-10, atol=1e-10)
    for name, grad in grads.items():
        torch.testing.assert_close(static_grads[name], grad, rtol=1e-9, atol=1e-10, msg=name)
    assert bool((today[mask.bool()] < 0).all())  # (real log-probs: the comparison has something to compare)


class _Spy:
    """A backend that records the shapes of the batches it is given to lay out."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.mode_independent, self.shapes = (
            inner,
            inner.name,
            inner.mode_independent,
            set(),
        )

    def layout(self, model, prompt_ids, prompt_mask, completion_ids, G, completion_mask=None):
        self.shapes.add((*prompt_ids.shape, *completion_ids.shape, G, completion_mask is None))
        return self.inner.layout(model, prompt_ids, prompt_mask, completion_ids, G, completion_mask)

    def logits(self, model, layout):
        return self.inner.logits(model, layout)


def test_the_model_sees_a_few_bucketed_shapes_whatever_the_batch(tok):  # noqa: F811
    model = _model(tok, 4)
    spy = _Spy(GroupedBackend())
    be = StaticShapeBackend(spy, max_width=10)
    sizes = [(P, Tc) for P in range(1, 21) for Tc in (1, 2, 3, 5, 8, 9, 10)]
    with torch.no_grad():
        for P, Tc in sizes:
            batch = _batch(tok, P, 2, Tc, seed=P + Tc)
            out = be.logits(model, be.layout(model, *batch[:3], 2, batch[3]))
            assert out.shape == (2 * P, Tc, len(tok))  # the real batch comes back
    widths = {bucket_size(batch_w) for batch_w in range(1, 9)}  # the prompts here are 4 to 8 tokens wide
    for rows, width, crows, cwidth, G, unmasked in spy.shapes:
        assert rows in (8, 16, 32) and crows == rows * G and width in widths
        assert cwidth in (8, 10)  # bucket 8, or capped at the widest completion (10, not 16)
        assert unmasked  # every position computed: no shape depends on where rows end
    assert len(spy.shapes) <= 3 * 2 * 2 < len(sizes)


def test_a_batch_whose_rows_are_not_its_prompts_times_G_is_refused(tok):  # noqa: F811
    model = _model(tok, 0)
    prompt_ids, prompt_mask, ids, _ = _batch(tok, 3, 2, 4, seed=0)
    with pytest.raises(ValueError, match="5 completion rows for 3 prompts x 2 samples"):
        StaticShapeBackend(GroupedBackend()).layout(model, prompt_ids, prompt_mask, ids[:5], 2)


def test_captured_scoring_gives_the_eager_log_probs_and_captures_once_per_model_and_bucket(tok):  # noqa: F811
    """With a capture (TracedCapture: fixed Python values, no host read, the same tensors read on each replay), the
    forwards without gradient that a step asks to be `replayed` replay one capture per model and bucket: batches of
    5, 7 and 6 prompts, of other widths and other completions, and weights updated in place between them, all score
    as the eager forward. Forwards not asked to be replayed (an evaluation's), or with gradients, run eagerly."""
    policy, reference = _model(tok, 3).double(), _model(tok, 4).double()
    capture = TracedCapture()
    graphed = StaticShapeBackend(GroupedBackend(), max_width=8, capture=capture)
    eager = StaticShapeBackend(GroupedBackend(), max_width=8)
    calls = 0
    for step, (P, Tc) in enumerate(((5, 6), (7, 8), (6, 5), (3, 6))):  # rows bucket 8, widths bucket 8
        batch = _batch(tok, P, 3, Tc, seed=step)
        for model in (reference, policy):
            with torch.inference_mode(), replayed(graphed):
                got = _logp(model, graphed, batch, 3)
            want = _logp(model, eager, batch, 3)
            calls += 1
            assert got.shape == batch[3].shape
            # the same ATen calls on the same float64 buffers: equal to rounding, and to today's forward too
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(got, _logp(model, GroupedBackend(), batch, 3), rtol=1e-10, atol=1e-10)
        with torch.no_grad():  # an optimizer step, in place: the next replay reads it
            for p in policy.parameters():
                p.add_(0.05 * torch.randn_like(p))
    assert capture.captured == 2  # one per model: every batch padded to one bucket
    assert capture.replayed == calls
    other = _batch(tok, 20, 3, 8, seed=9)  # (a bucket of 32 prompts: a capture would be new)
    with (
        torch.inference_mode()
    ):  # not within `replayed`: the eager forward itself, and nothing captured for it
        assert torch.equal(_logp(policy, graphed, other, 3), _logp(policy, eager, other, 3))
    assert (capture.captured, capture.replayed) == (2, calls)
    # with gradients (the policy's forward in the update), the forward runs eagerly, and gradients flow
    with replayed(graphed):
        logp = _logp(policy, graphed, batch, 3)
    logp.sum().backward()
    assert capture.replayed == calls and policy.transformer.wte.weight.grad.abs().sum() > 0


def test_the_graphed_training_forward_gives_the_eager_log_probs_and_gradients(tok):  # noqa: F811
    """With `graph_training` (make_graphed_callables; here TracedTraining, which traces the forward and backward as
    a capture would), the forwards with gradient run through one graphed module per model and bucket: batches of 5,
    7, 6 and 3 prompts, weights updated in place between them, give the eager forward's log-probs and gradients.
    Forwards without gradient do not use it."""
    policy = _model(tok, 3).double()
    graph = TracedTraining()
    graphed = StaticShapeBackend(GroupedBackend(), max_width=8, graph_training=graph)
    eager = StaticShapeBackend(GroupedBackend(), max_width=8)
    for step, (P, Tc) in enumerate(((5, 6), (7, 8), (6, 5), (3, 6))):  # rows bucket 8, widths bucket 8
        batch = _batch(tok, P, 3, Tc, seed=step)
        weights = torch.randn(
            batch[3].shape, generator=torch.Generator().manual_seed(step), dtype=torch.float64
        )
        results = []
        for be in (graphed, eager):
            policy.zero_grad()
            logp = _logp(policy, be, batch, 3)
            (logp * weights).sum().backward()
            results.append((logp.detach(), {n: p.grad.clone() for n, p in policy.named_parameters()}))
        (got, got_grads), (want, want_grads) = results
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)  # (one computation, run twice)
        for name, grad in want_grads.items():
            torch.testing.assert_close(got_grads[name], grad, rtol=1e-12, atol=1e-12, msg=name)
        with torch.no_grad():  # an optimizer step, in place
            for p in policy.parameters():
                p.add_(0.05 * torch.randn_like(p))
    assert (graph.graphed, graph.calls) == (1, 4)  # one graphed module: every batch padded to one bucket
    with torch.no_grad():
        _logp(policy, graphed, batch, 3)
    assert graph.calls == 4
