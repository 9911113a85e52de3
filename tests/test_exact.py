"""tinygrpo.oracles.exact: the enumerated completion distribution against independent computations.

Every test compares the oracle with something computed another way: a brute-force enumeration, the trainer's own
scorer on single completions, Monte Carlo samples from `sample_completions` (within 5 standard errors), finite
differences of J, and the model's next-token softmax and the tabular bandit for one-token answers. Models are
small random tiny_lm's with a large init range, so the distributions are far from uniform.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _lm import encode
from _numerics import assert_same_math
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from rewards import accuracy
from tiny_lm import TinyLMConfig, TinyLMForCausalLM
from tinygrpo.algorithm.core import selective_log_softmax
from tinygrpo.model.backend import GenericBackend, GroupedBackend
from tinygrpo.oracles.bandit import TablePolicy
from tinygrpo.oracles.completion_space import completion_count, completion_space, enumerate_completions
from tinygrpo.oracles.exact import exact_objective, score_completions
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.sampling import completion_logits, sample_completions

PROMPTS = ["1+2=", "37+48="]  # different lengths: the batch is left-padded
V, EOS, PAD = 14, 1, 0


def make_model(seed: int, dtype: torch.dtype = torch.float32, **kw) -> TinyLMForCausalLM:
    torch.manual_seed(seed)
    cfg = dict(initializer_range=0.3, n_embd=32, n_head=2)
    cfg.update(kw)
    return TinyLMForCausalLM(TinyLMConfig(**cfg)).eval().to(dtype)


def seq_logprobs(model, ids, mask, completion_ids, completion_mask, G, temperature):
    """The trainer's way: score sampled rows with `completion_logits`, sum `selective_log_softmax` over the mask."""
    with torch.no_grad():  # the generic forward: linear in G (the grouped one attends over all G at once)
        logits = completion_logits(model, ids, mask, completion_ids, G, completion_mask, GenericBackend())
    lp = selective_log_softmax(logits.double(), completion_ids, temperature)
    return (lp * completion_mask).sum(-1)


def synthetic_reward(row: list[int]) -> float:
    """A reward on the ids that depends on the whole distribution: first token, ending, length."""
    n = row.index(EOS) + 1 if EOS in row else len(row)
    return float(row[0] in (3, 4, 5)) + 0.5 * float(EOS in row) - 0.2 * n + 0.3 * float(PAD in row[:n])


def space_rewards(space, P: int) -> torch.Tensor:
    return torch.tensor([synthetic_reward(r) for r in space.completion_ids.tolist()]).expand(P, -1)


def mc_check(samples: torch.Tensor, exact: float, k: float = 5.0) -> None:
    mean, se = float(samples.mean()), float(samples.std() / math.sqrt(samples.numel()))
    assert se > 0
    assert abs(mean - exact) < k * se, f"MC {mean:.5f} +- {se:.5f} vs exact {exact:.5f}"


# ---------------------------------------------------------------- enumeration


def brute_force(tokens: list[int], T: int) -> set[tuple[int, ...]]:
    """Every length-T token string cut after its first EOS and padded: the distinct completions."""
    out = set()
    for seq in itertools.product(tokens, repeat=T):
        seq = list(seq)
        if EOS in seq:
            k = seq.index(EOS)
            seq = seq[: k + 1] + [PAD] * (T - k - 1)
        out.add(tuple(seq))
    return out


@pytest.mark.parametrize(("tokens", "T"), [(None, 1), (None, 3), ([1, 2, 5, 7], 4), ([0, 1, 9], 5)])
def test_enumeration_is_every_completion(tokens, T):
    ids, mask = enumerate_completions(V, EOS, PAD, T, tokens)
    toks = list(range(V)) if tokens is None else tokens
    rows = [tuple(r) for r in ids.tolist()]
    assert len(rows) == len(set(rows)) == completion_count(len(toks), T)
    assert set(rows) == brute_force(toks, T)
    for row, m in zip(ids.tolist(), mask.tolist(), strict=True):
        k = (
            row.index(EOS) if EOS in row else T - 1
        )  # rollout.decode's mask: up to and including the first EOS
        assert m == [1] * (k + 1) + [0] * (T - k - 1)


def test_completion_counts():
    # 13 symbols incl. EOS (no <pad>): 1 + 12 + 144 + 1728 + 20736; all 14 ids of the lm head: m = 13.
    assert completion_count(13, 4) == 22621
    assert enumerate_completions(V, EOS, PAD, 4)[0].shape == (1 + 13 + 13**2 + 13**3 + 13**4, 4)
    assert enumerate_completions(V, EOS, PAD, 4, range(1, V))[0].size(0) == 22621


# ---------------------------------------------------------------- probabilities


@pytest.mark.parametrize("backend", [GenericBackend, GroupedBackend])
def test_probabilities_sum_to_one_and_match_the_scorer(tok, backend):
    model = make_model(
        0, torch.float64
    )  # the prefix tree against row by row: two orders (tests/_numerics.py)
    ids, mask = encode(tok, PROMPTS)
    space = completion_space(V, EOS, PAD, 3)
    N = space.completion_ids.size(0)
    res = exact_objective(model, ids, mask, space, torch.zeros(2, N), 1.3, grad=False, backend=backend())
    assert_same_math(res.probs.sum(-1), torch.ones(2, dtype=torch.float64))
    assert res.probs.min() > 0
    # A few completions of each length, scored one by one with the trainer's scorer.
    pick = torch.tensor([0, 1, 5, 13, 14, 100, 182, 183, 1000, N - 1])
    for p in range(2):
        direct = seq_logprobs(
            model,
            ids[p : p + 1],
            mask[p : p + 1],
            space.completion_ids[pick],
            space.completion_mask[pick],
            len(pick),
            1.3,
        )
        assert_same_math(res.logprobs[p, pick], direct)


def test_missing_token_is_an_error(tok):
    # The sampler can emit <pad> (every id of the lm head): leaving it out loses probability mass.
    model = make_model(0)
    ids, mask = encode(tok, PROMPTS)
    space = completion_space(V, EOS, PAD, 2, tokens=range(1, V))
    with pytest.raises(ValueError, match="sum to"):
        exact_objective(model, ids, mask, space, torch.zeros(2, space.completion_ids.size(0)), grad=False)


# ---------------------------------------------------------------- law of large numbers


def test_monte_carlo_reward_and_kl(tok):
    model, ref = make_model(0), make_model(1)
    ids, mask = encode(tok, PROMPTS)
    T, temperature, G = 3, 1.5, 8000
    space = completion_space(V, EOS, PAD, T)
    res = exact_objective(
        model, ids, mask, space, space_rewards(space, 2), temperature, ref_model=ref, grad=False
    )

    params = SamplingParams(T, temperature)
    gen = torch.Generator().manual_seed(0)
    ro = sample_completions(model, ids, mask, G, params, gen, eos_token_id=EOS, pad_token_id=PAD)
    c = torch.nn.functional.pad(ro.completion_ids, (0, T - ro.completion_ids.size(1)), value=PAD)
    m = torch.nn.functional.pad(ro.completion_mask, (0, T - ro.completion_mask.size(1)))
    r = torch.tensor([synthetic_reward(row) for row in c.tolist()], dtype=torch.float64).view(2, G)
    log_ratio = seq_logprobs(model, ids, mask, c, m, G, temperature) - seq_logprobs(
        ref, ids, mask, c, m, G, temperature
    )
    lengths = m.sum(-1).double().view(2, G)
    for p in range(2):
        mc_check(r[p], float(res.expected_reward[p]))
        mc_check(log_ratio.view(2, G)[p], float(res.kl[p]))  # k1 on whole sequences: unbiased for the KL
        mc_check(lengths[p], float(res.expected_length[p]))
    assert abs(res.J - float(res.expected_reward.mean())) < 1e-12
    assert res.kl.min() > 0.1  # the check above is not trivial


def test_kl_is_the_kl_of_the_completion_distributions(tok):
    # E[sum over positions of the per-position KL] (the oracle) = sum_y pi(y) log(pi(y) / pi_ref(y)) (chain rule).
    model, ref = make_model(0, torch.float64), make_model(1, torch.float64)  # two orders: float64
    ids, mask = encode(tok, PROMPTS)
    space = completion_space(V, EOS, PAD, 3)
    zeros = torch.zeros(2, space.completion_ids.size(0))
    res = exact_objective(model, ids, mask, space, zeros, 0.7, ref_model=ref, grad=False)
    q = exact_objective(ref, ids, mask, space, zeros, 0.7, grad=False)
    seq_kl = (res.probs * (res.logprobs - q.logprobs)).sum(-1)
    assert_same_math(res.kl, seq_kl)
    lengths = space.completion_mask.sum(-1).double()
    assert_same_math(res.kl_per_token, seq_kl / (res.probs * lengths).sum(-1))


# ---------------------------------------------------------------- gradient


@pytest.mark.parametrize(
    ("backend", "chunk_rows"), [(GenericBackend, None), (GenericBackend, 7), (GroupedBackend, 40)]
)
def test_gradient_matches_finite_differences(tok, backend, chunk_rows):
    model = make_model(0, torch.float64)
    ids, mask = encode(tok, PROMPTS)
    space = completion_space(V, EOS, PAD, 3)
    rewards = torch.rand(2, space.completion_ids.size(0), generator=torch.Generator().manual_seed(0))
    kw = dict(backend=backend(), chunk_rows=chunk_rows)
    res = exact_objective(model, ids, mask, space, rewards, 0.8, **kw)

    theta = parameters_to_vector(model.parameters()).detach().clone()
    d = torch.randn(theta.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    d /= d.norm()
    eps = 1e-4
    js = []
    for s in (1, -1):
        vector_to_parameters(theta + s * eps * d, model.parameters())
        js.append(exact_objective(model, ids, mask, space, rewards, 0.8, grad=False, **kw).J)
    vector_to_parameters(theta, model.parameters())
    fd = (js[0] - js[1]) / (2 * eps)
    assert abs(float(res.grad @ d) - fd) < 1e-7 * max(1.0, abs(fd))
    assert abs(fd) > 1e-3  # a direction J actually changes along


def test_score_function_estimator(tok):
    # E[(R - b) grad log pi(y)] = grad J for any constant b; per-sample directional derivatives by finite differences.
    model = make_model(0, torch.float64)
    ids, mask = encode(tok, PROMPTS[:1])
    T, temperature, G = 3, 1.2, 8000
    space = completion_space(V, EOS, PAD, T)
    res = exact_objective(model, ids, mask, space, space_rewards(space, 1), temperature)

    params = SamplingParams(T, temperature)
    gen = torch.Generator().manual_seed(0)
    ro = sample_completions(model, ids, mask, G, params, gen, eos_token_id=EOS, pad_token_id=PAD)
    c, m = ro.completion_ids, ro.completion_mask
    r = torch.tensor(
        [synthetic_reward(row + [PAD] * (T - len(row))) for row in c.tolist()], dtype=torch.float64
    )
    theta = parameters_to_vector(model.parameters()).detach().clone()
    # Along the steepest direction the exact value |grad J| stands out from the noise (a wrong gradient would not).
    d = res.grad / res.grad.norm()
    eps = 1e-5
    lp = []
    for s in (1, -1):
        vector_to_parameters(theta + s * eps * d, model.parameters())
        lp.append(seq_logprobs(model, ids, mask, c, m, G, temperature))
    vector_to_parameters(theta, model.parameters())
    dlogp = (lp[0] - lp[1]) / (2 * eps)  # (G,)
    mc_check((r - res.J) * dlogp, float(res.grad @ d))


# ---------------------------------------------------------------- one-token answers


def test_one_token_answers_are_a_softmax_bandit(tok):
    model = make_model(3, torch.float64)
    ids, mask = encode(tok, PROMPTS)
    temperature = 0.7
    space = completion_space(V, EOS, PAD, 1)
    token = space.completion_ids.view(-1)  # one completion per token, EOS included
    assert sorted(token.tolist()) == list(range(V))
    rewards = torch.rand(2, V, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # by token id
    res = exact_objective(model, ids, mask, space, rewards[:, token], temperature)

    def next_logits() -> torch.Tensor:  # (P, V) straight from the model's forward
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits[:, -1]

    z = next_logits()
    expected = (torch.softmax(z / temperature, -1) * rewards).sum(-1)
    assert torch.allclose(res.expected_reward, expected, atol=1e-12)

    # The bandit: a TablePolicy whose rows are the tempered logits; its gradient w.r.t. the table, chained with the
    # model's logits' derivative along a direction d (finite differences), is the model's gradient along d.
    table = TablePolicy(2, V).double()  # (its init would round the table to float32)
    with torch.no_grad():
        table.logits.copy_(z / temperature)
    probs = table.dist(torch.arange(2)).probs  # (P, V)
    J_table = (probs * rewards).sum(-1).mean()
    assert abs(float(J_table.detach()) - res.J) < 1e-12
    (g_table,) = torch.autograd.grad(J_table, table.logits)
    theta = parameters_to_vector(model.parameters()).detach().clone()
    d = torch.randn(theta.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    eps = 1e-5
    zs = []
    for s in (1, -1):
        vector_to_parameters(theta + s * eps * d, model.parameters())
        zs.append(next_logits() / temperature)
    vector_to_parameters(theta, model.parameters())
    jvp = (zs[0] - zs[1]) / (2 * eps)  # (P, V): d(table)/d(theta) . d
    chained = float((g_table * jvp).sum())
    assert abs(float(res.grad @ d) - chained) < 1e-7 * max(1.0, abs(chained))


# ---------------------------------------------------------------- rewards


def test_score_completions_with_the_accuracy_reward(tok):
    space = completion_space(V, EOS, PAD, 3)
    R = score_completions(tok, PROMPTS, space, ["accuracy"], columns={"answer": ["3", "85"]})
    assert R.shape == (2, space.completion_ids.size(0))
    # "3<eos>" with a <pad> before or after the 3 (dropped when decoding): 3 completions; "85<eos>" fits once.
    assert R.sum(-1).tolist() == [3.0, 1.0]
    texts = [
        tok.decode([t for t in row if t != PAD], skip_special_tokens=False)
        for row in space.completion_ids.tolist()
    ]
    for p, gold in enumerate(["3", "85"]):
        assert R[p].tolist() == accuracy(texts, [gold] * len(texts))
    # 0/1 rewards are their own accuracy; the oracle's accuracy is the probability of the right answer.
    model = make_model(0)
    ids, mask = encode(tok, PROMPTS)
    res = exact_objective(model, ids, mask, space, R, grad=False)
    right = torch.tensor([tok.convert_tokens_to_ids("3"), EOS, PAD])
    i = int((space.completion_ids == right).all(-1).nonzero())
    assert res.accuracy[0] >= res.probs[0, i] > 0
    assert torch.equal(res.accuracy, res.expected_reward)
