"""tinygrpo.algorithm.advantage_estimators against plain-Python loops written from the definitions: OPO's length-weighted
baseline (verl), pass@k by enumerating every k-subset (Chen et al. 2025), REINFORCE++'s whitening over an explicit
list of tokens (verl's masked_whiten), ReMax, and TRL's normalize_then_sum (GDPO) with its nanmean / nanstd."""

from __future__ import annotations

import math
import statistics
from itertools import combinations
from pathlib import Path

import pytest
import torch
from _numerics import assert_same_math
from _runs import reference_trainer, run_inproc
from safetensors.torch import load_file

from tinygrpo.algorithm.advantage_estimators import (
    ADV_ESTIMATORS,
    ADVANTAGE_MODES,
    advantages,
    normalize_then_sum,
    opo_advantages,
    pass_at_k_advantages,
    register_adv_est,
    reinforce_pp_advantages,
    remax_advantages,
)
from tinygrpo.algorithm.core import group_advantages
from tinygrpo.run.config import ConfigError, GRPOConfig
from tinygrpo.run.logs import read_jsonl

NAN = math.nan
G = 6
# 6 groups of 6: a spread, NaN left out, all equal (0.3 repeated), all NaN but one, binary, equal valid rewards
REWARDS = [
    *[0.2, 1.5, -0.3, 0.9, 0.9, 2.0],
    *[1.0, NAN, 0.4, -1.0, NAN, 0.7],
    *[0.3] * 6,
    *[NAN] * 5 + [1.0],
    *[1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
    *[NAN, 2.0, 2.0, NAN, 2.0, 2.0],
]
ZERO_STD = [False, False, True, True, False, True]
LENGTHS = [3, 1, 4, 2, 2, 5, 1, 2, 3, 4, 5, 1, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 4, 1, 5, 2, 3, 4, 1, 2, 2, 3, 3, 4, 4]  # fmt: skip
EXACT = {"rtol": 1e-12, "atol": 1e-12}


def _t(xs):
    return torch.tensor(xs, dtype=torch.float64)


def _groups(xs):
    return [xs[i : i + G] for i in range(0, len(xs), G)]


def _valid(group):
    return [x for x in group if not math.isnan(x)]


def _zero_std(group):
    v = _valid(group)
    return len(v) < 2 or all(x == v[0] for x in v)


def _check(got, zero_std, expected):
    adv, zs = got
    assert adv.dtype == torch.float64 and zs.tolist() == ZERO_STD
    torch.testing.assert_close(adv, _t(expected), **EXACT)
    nan = torch.isnan(_t(REWARDS))
    assert (adv[nan] == 0).all()  # exactly 0, never NaN
    if zero_std:
        assert (adv.view(-1, G)[torch.tensor(ZERO_STD)] == 0).all()


def test_opo_is_r_minus_the_length_weighted_mean():
    expected = []
    for rs, ls in zip(_groups(REWARDS), _groups(LENGTHS), strict=True):
        pairs = [(r, n) for r, n in zip(rs, ls, strict=True) if not math.isnan(r)]
        b = sum(r * n for r, n in pairs) / sum(n for _, n in pairs)
        expected += [0.0 if math.isnan(r) or _zero_std(rs) else r - b for r in rs]
    _check(opo_advantages(_t(REWARDS), torch.tensor(LENGTHS), G), True, expected)
    # equal lengths: the plain group mean (Dr. GRPO's r - mean)
    same = opo_advantages(_t(REWARDS), torch.full((len(REWARDS),), 3), G)[0]
    plain = [
        0.0 if math.isnan(r) or _zero_std(rs) else r - statistics.fmean(_valid(rs))
        for rs in _groups(REWARDS)
        for r in rs
    ]
    torch.testing.assert_close(same, _t(plain), **EXACT)


def _pass_at_k_by_enumeration(group, k):
    """Chen et al. 2025 from the definition: R = the mean over every k-subset of the valid samples of its max reward
    (pass@k), and a sample's advantage is (the mean over the k-subsets that contain it of their max - R) / sigma,
    sigma = sqrt(R (1 - R)) (the std of a 0/1 outcome); 0 where sigma is 0."""
    idx = [i for i, x in enumerate(group) if not math.isnan(x)]
    if len(idx) < k or _zero_std(group):
        return [0.0] * len(group)
    subsets = list(combinations(idx, k))
    R = statistics.fmean(max(group[i] for i in s) for s in subsets)
    sigma = math.sqrt(R * (1 - R))
    out = []
    for i in range(len(group)):
        if i not in idx or sigma == 0:
            out.append(0.0)
            continue
        mine = statistics.fmean(max(group[j] for j in s) for s in subsets if i in s)
        out.append((mine - R) / sigma)
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_pass_at_k_matches_enumeration_of_k_subsets(k):
    rewards = [
        *[1, 0, 0, 0, 1, 0],
        *[1, NAN, 0, 0, NAN, 0],  # n = 4 valid: k = 6 > n gives 0
        *[1, 1, 1, 1, 1, 1],
        *[0, 0, 0, 0, 0, 0],
        *[1, 1, 1, 1, 0, 1],  # one wrong: every k >= 2 subset passes, R = 1 -> 0
        *[0, 1, 0, 0, 0, 0],
    ]
    adv, zs = pass_at_k_advantages(_t(rewards), G, k)
    expected = [a for g in _groups(rewards) for a in _pass_at_k_by_enumeration([float(x) for x in g], k)]
    torch.testing.assert_close(adv, _t(expected), **EXACT)
    # zero_std = no signal: every advantage of the group is 0 (all right, all wrong, or too few wrong for k)
    assert zs.tolist() == [bool((torch.tensor(g) == 0).all()) for g in _groups(expected)]
    assert zs[2] and zs[3] and zs[4] == (k >= 2) and zs[1] == (k >= 4)
    assert (adv.view(-1, G)[2:4] == 0).all()
    if k >= 2:
        assert (adv.view(-1, G)[4] == 0).all()  # n - c < k: pass@k is certainly 1
    if k >= 4:  # n = 4 valid, 3 of them wrong: fewer than k wrong
        assert (adv.view(-1, G)[1] == 0).all()
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k_advantages(_t(rewards), G, G)  # k = G leaves no signal in any group


def test_pass_at_k_closed_form_example_and_k1_is_the_population_z_score():
    # N = 8, c = 2, k = 4: R = 1 - C(6,4)/C(8,4) = 55/70; correct (1 - R)/sigma, wrong (1 - R - C(5,3)/C(7,3))/sigma
    r = [1, 1, 0, 0, 0, 0, 0, 0]
    adv, _ = pass_at_k_advantages(_t(r), 8, 4)
    R = 55 / 70
    sigma = math.sqrt(R * (1 - R))
    assert abs(R - 0.7857) < 1e-4
    assert adv[:2].tolist() == pytest.approx([(1 - R) / sigma] * 2, rel=1e-12)
    assert adv[0] == pytest.approx(0.522, abs=1e-3)
    assert adv[2:].tolist() == pytest.approx([(1 - R - 10 / 35) / sigma] * 6, rel=1e-12)
    assert adv[2] == pytest.approx(-0.174, abs=1e-3)
    # k = 1: pass@1 is the mean, and the advantages GRPO's z-score with the population std (no eps)
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (10 * 8,), generator=g).double()
    adv, _ = pass_at_k_advantages(rewards, 8, 1)
    expected = []
    for grp in rewards.view(-1, 8).tolist():
        mu, sd = statistics.fmean(grp), statistics.pstdev(grp)
        expected += [0.0 if sd == 0 else (x - mu) / sd for x in grp]
    torch.testing.assert_close(adv, _t(expected), **EXACT)
    z, _ = group_advantages(rewards, 8, std_correction=0, eps=1e-8)
    torch.testing.assert_close(adv, z, rtol=1e-7, atol=1e-7)  # up to GRPO's eps


def test_pass_at_k_rejects_non_binary_rewards_and_bad_k():
    with pytest.raises(ValueError, match="0/1"):
        pass_at_k_advantages(_t([1.0, 0.5, 0.0, 1.0]), 4, 2)
    with pytest.raises(ValueError, match="0/1"):
        advantages(_t([1.0, 0.0, 2.0, 1.0]), 2, mode="pass_at_k", k=1)
    with pytest.raises(ValueError, match="k"):
        pass_at_k_advantages(_t([1.0, 0.0, 0.0, 1.0]), 4, 5)
    adv, _ = pass_at_k_advantages(_t([1.0, NAN, 0.0, 1.0]), 4, 2)  # NaN is "no reward", not a bad reward
    assert adv[1] == 0


def _whiten_over_tokens(xs, lengths):
    """verl's masked_whiten of a per-sequence value broadcast over its tokens: every token of the batch a list entry,
    mean and UNBIASED variance over the list, (x - mean) / sqrt(var + 1e-8)."""
    tokens = [x for x, n in zip(xs, lengths, strict=True) if x is not None for _ in range(n)]
    mu, var = statistics.fmean(tokens), statistics.variance(tokens)
    return [None if x is None else (x - mu) / math.sqrt(var + 1e-8) for x in xs]


@pytest.mark.parametrize("baseline", [False, True])
def test_reinforce_pp_whitens_over_the_batchs_tokens(baseline):
    xs = []
    for rs in _groups(REWARDS):
        mean = statistics.fmean(_valid(rs))
        xs += [None if math.isnan(r) else r - mean if baseline else r for r in rs]
    white = _whiten_over_tokens(xs, LENGTHS)
    expected = []
    for i, w in enumerate(white):
        # no baseline: every valid sample keeps its whitened reward (as "reinforce"); with the group mean subtracted,
        # groups without a spread get 0 (their r - mean is 0 before whitening shifts it)
        expected.append(0.0 if w is None or (baseline and ZERO_STD[i // G]) else w)
    got = reinforce_pp_advantages(_t(REWARDS), torch.tensor(LENGTHS), G, baseline=baseline)
    _check(got, baseline, expected)
    mode = "reinforce_pp_baseline" if baseline else "reinforce_pp"
    via = advantages(_t(REWARDS), G, mode=mode, lengths=torch.tensor(LENGTHS))
    torch.testing.assert_close(via[0], got[0], rtol=0, atol=0)
    if not baseline:
        assert (got[0].view(-1, G)[2] != 0).all()  # the all-equal group is not zeroed without a baseline


def test_one_token_answers_opo_is_dr_grpo_and_reinforce_pp_baseline_whitens_r_minus_mean():
    """T = 1 (the tabular bandit): every length is 1, so OPO's baseline is the plain mean (GRPO with scale_rewards
    "none") and REINFORCE++-baseline whitens r - group mean with equal weights."""
    ones = torch.ones(len(REWARDS), dtype=torch.long)
    opo = advantages(_t(REWARDS), G, mode="opo", lengths=ones)[0]
    dr = group_advantages(_t(REWARDS), G, mode="grpo", scale_rewards="none")[0]
    torch.testing.assert_close(opo, dr, **EXACT)
    rpp = advantages(_t(REWARDS), G, mode="reinforce_pp_baseline", lengths=ones)[0]
    x = [r - statistics.fmean(_valid(rs)) for rs in _groups(REWARDS) for r in rs if not math.isnan(r)]
    mu, sd = statistics.fmean(x), math.sqrt(statistics.variance(x) + 1e-8)
    expected = [
        0.0
        if math.isnan(r) or ZERO_STD[i // G]
        else (r - statistics.fmean(_valid(_groups(REWARDS)[i // G])) - mu) / sd
        for i, r in enumerate(REWARDS)
    ]
    torch.testing.assert_close(rpp, _t(expected), **EXACT)


def test_remax_subtracts_the_greedy_reward_nan_falls_back_to_the_group_mean():
    rewards = [
        *[0.2, 1.5, -0.3, 0.9, 0.9, 2.0],
        *[1.0, NAN, 0.4, -1.0, NAN, 0.7],
        *[0.3] * 6,  # all equal, and so is the greedy answer's reward: 0 under any reading
        *[NAN] * 5 + [1.0],
        *[1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
        *[NAN, 2.0, 2.0, NAN, 2.0, 2.0],
    ]
    greedy = [1.0, NAN, 0.3, 1.0, 0.0, 2.0]  # (the one valid sample of group 3 ties its greedy answer)
    expected = []
    for rs, b in zip(_groups(rewards), greedy, strict=True):
        base = statistics.fmean(_valid(rs)) if math.isnan(b) else b
        expected += [0.0 if math.isnan(r) or _zero_std(rs) else r - base for r in rs]
    got = remax_advantages(_t(rewards), _t(greedy), G)
    _check(got, True, expected)
    via = advantages(_t(rewards), G, mode="remax", greedy_rewards=_t(greedy))
    torch.testing.assert_close(via[0], got[0], rtol=0, atol=0)
    assert got[0][6].item() == pytest.approx(1.0 - statistics.fmean([1.0, 0.4, -1.0, 0.7]), rel=1e-12)


def _nanmean(xs):
    v = _valid(xs)
    return statistics.fmean(v) if v else NAN


def _nanstd(xs):
    """TRL's nanstd: Bessel-corrected over the non-NaN values, NaN with fewer than 2."""
    v = _valid(xs)
    return statistics.stdev(v) if len(v) > 1 else NAN


def test_normalize_then_sum_matches_trls_gdpo():
    per_func = [  # (N, F = 3): a 0/1 reward, a dense one with NaN, one applying to a few samples only
        [1, 0.3, NAN], [0, 0.1, NAN], [0, NAN, 2.0], [1, 0.9, NAN], [1, 0.5, 1.0], [0, 0.2, NAN],
        [1, 0.4, NAN], [1, 0.4, NAN], [1, 0.4, NAN], [1, 0.4, NAN], [1, 0.4, NAN], [1, 0.4, NAN],
        [NAN, NAN, NAN], [0, 0.8, 3.0], [1, NAN, NAN], [0, 0.7, 1.0], [1, 0.6, NAN], [0, 0.0, 2.0],
        [0, 0.9, NAN], [1, 0.1, NAN], [0, 0.3, NAN], [1, 0.5, NAN], [0, 0.2, NAN], [1, 0.6, NAN],
    ]  # fmt: skip
    weights = [1.0, 0.5, 2.0]
    F = len(weights)
    summed = []
    for start in range(0, len(per_func), G):
        rows = per_func[start : start + G]
        z = [[NAN] * F for _ in rows]
        for f in range(F):
            col = [float(r[f]) for r in rows]
            mean, std = _nanmean(col), _nanstd(col)
            for i, x in enumerate(col):
                z[i][f] = (x - mean) / (std + 1e-4)  # NaN where x is NaN or the std is undefined
        for i, r in enumerate(rows):
            terms = [weights[f] * z[i][f] for f in range(F) if not math.isnan(z[i][f])]  # nansum
            summed.append(NAN if all(math.isnan(x) for x in r) else sum(terms))
    pf = _t(per_func)
    torch.testing.assert_close(normalize_then_sum(pf, _t(weights), G), _t(summed), equal_nan=True, **EXACT)
    mu, sd = _nanmean(summed), _nanstd(summed)
    expected = []
    for grp in _groups(summed):
        for s in grp:  # TRL: (s - nanmean) / (nanstd + 1e-4), NaN -> 0; groups without a spread: 0 (tinygrpo)
            expected.append(0.0 if math.isnan(s) or _zero_std(grp) else (s - mu) / (sd + 1e-4))
    adv, zs = advantages(
        _t([0.0] * len(per_func)),  # the weighted sums: not used by normalize_then_sum
        G,
        mode="rloo",
        rewards_per_func=pf,
        reward_weights=_t(weights),
        multi_objective_aggregation="normalize_then_sum",
    )
    torch.testing.assert_close(adv, _t(expected), **EXACT)
    assert zs.tolist() == [_zero_std(g) for g in _groups(summed)] == [False, True, False, False]
    assert adv[12] == 0 and (adv[6:12] == 0).all()


def test_dispatcher_nan_rewards_get_exactly_zero_in_every_mode():
    rewards = _t([1.0, NAN, 0.0, 1.0, NAN, 0.0, 0.0, 1.0])
    lengths = torch.tensor([2, 3, 1, 4, 2, 2, 3, 1])
    for mode in ADVANTAGE_MODES:
        k = 2 if mode == "pass_at_k" else 4  # (k is pass@k's alone: set for another mode it is refused)
        adv, _ = advantages(rewards, 4, mode=mode, lengths=lengths, greedy_rewards=_t([1.0, NAN]), k=k)
        assert torch.isfinite(adv).all() and adv[1] == 0 and adv[4] == 0, mode
        assert (adv[[0, 2, 3, 5, 6, 7]] != 0).any(), mode
    grpo = advantages(rewards, 4, mode="grpo", scale_rewards="batch")
    expected = group_advantages(rewards, 4, mode="grpo", scale_rewards="batch")
    assert torch.equal(grpo[0], expected[0]) and torch.equal(grpo[1], expected[1])
    with pytest.raises(ValueError, match="mode"):
        advantages(rewards, 4, mode="ppo")


# ---------------------------------------------------------------------------------------------------------------
# config and the trainer


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"advantage_mode": "pass_at_k", "train_pass_k": 9, "num_generations": 8}, "train_pass_k"),
        ({"advantage_mode": "pass_at_k", "train_pass_k": 0}, "train_pass_k"),
        ({"advantage_mode": "gae"}, "advantage_mode"),
        ({"multi_objective_aggregation": "sum"}, "multi_objective_aggregation"),
    ],
)
def test_config_rejects_bad_advantage_settings_naming_the_field(kw, field):
    with pytest.raises(ConfigError, match=field):
        GRPOConfig(**kw)


def test_train_pass_k_set_for_another_mode_is_refused_not_ignored():
    with pytest.raises(
        ConfigError, match="train_pass_k=8 is read by advantage_mode pass_at_k only; this run's is grpo"
    ):
        GRPOConfig(train_pass_k=8)
    assert GRPOConfig(advantage_mode="rloo").train_pass_k == 4  # (its default, unset: nothing to say)
    assert GRPOConfig(advantage_mode="pass_at_k", train_pass_k=2).train_pass_k == 2


QUIET = (
    "--dataset_test_split",
    "",
    *"--max_generations 2 --logging_steps 1 --save_steps 0 --dynamic_sampling false --prompt_sampler uniform".split(),
    *"--explore_rounds 0 --num_mini_batches 2".split(),
)


@pytest.mark.parametrize(
    "extra",
    [
        ("--advantage_mode", "opo"),
        ("--advantage_mode", "pass_at_k", "--train_pass_k", "2"),
        ("--advantage_mode", "reinforce_pp"),
        ("--advantage_mode", "reinforce_pp_baseline"),
        ("--advantage_mode", "remax"),
        ("--multi_objective_aggregation", "normalize_then_sum", "--reward_funcs", "accuracy", "format"),
    ],
)
def test_advantage_modes_train_two_steps(seed_reference, tmp_path, extra):
    out = tmp_path / "run"
    assert run_inproc(seed_reference, out, *QUIET, *extra) == 0
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in rows] == [2, 4]  # (optimizer steps, as TRL counts them: 2 a generation)
    assert all(math.isfinite(r["loss"]) and r["frac_completions_with_signal"] > 0 for r in rows)
    before = load_file(str(Path(seed_reference) / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    assert sum(not torch.equal(before[k], after[k]) for k in before) > 10


@torch.no_grad()
def test_remax_baseline_is_the_reward_of_a_plain_greedy_decode(seed_reference, tmp_path):
    """The trainer's remax advantages are r - (the strict accuracy of the prompt's greedy answer), the greedy answer
    decoded here with plain forwards (argmax of the last position, at most 3 tokens, stop at <eos>)."""
    tr = reference_trainer(seed_reference, tmp_path, advantage_mode="remax")
    first = tr.generator.generate().first
    model, tok, n_gen = tr.model.eval(), tr.tokenizer, tr.cfg.num_generations
    greedy = []
    for i in first.idx:
        ids = tok(tr.prompts.texts[i])["input_ids"]
        out = []
        for _ in range(tr.cfg.max_completion_length):
            nxt = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
            out.append(nxt)
            if nxt == tok.eos_token_id:
                break
        right = out[-1] == tok.eos_token_id and tok.decode(out[:-1]) == str(tr.prompts.columns["answer"][i])
        greedy.append(float(right))
    assert 0 < sum(greedy) < len(greedy)
    rewards = first.all_rewards.double().view(-1, n_gen).tolist()
    adv = first.batch.advantages.double().view(-1, n_gen).tolist()
    checked = 0
    for rs, a, b in zip(rewards, adv, greedy, strict=True):
        if not _zero_std(rs):
            assert a == pytest.approx([r - b for r in rs], abs=1e-6)
            checked += 1
    assert checked > 0


# ---------------------------------------------------------------------------------------------------------------
# the registry: a new estimator is one decorated function, and the trainer gathers what it needs


@pytest.fixture
def length_baseline():
    """An estimator registered for one test: A = (the group's mean length - l) where the reward is 1, else 0."""

    @register_adv_est("shorter_is_better", needs=("lengths",))
    def shorter_is_better(x, cfg):
        n = x.lengths.to(torch.float64).view(-1, x.num_generations)
        r = x.rewards.to(torch.float64).view(-1, x.num_generations)
        adv = torch.where(r == 1, n.mean(1, keepdim=True) - n, torch.zeros_like(n))
        return adv.reshape(-1).to(x.rewards.dtype), ~adv.ne(0).any(1)

    yield "shorter_is_better"
    del ADV_ESTIMATORS["shorter_is_better"]


def test_a_registered_estimator_is_an_advantage_mode_and_gets_what_it_needs(
    length_baseline, seed_reference, tmp_path
):
    """Registered after the config was loaded, the estimator is a valid advantage_mode; the trainer's generation
    round hands it the lengths it asked for (computed here again from the completion mask) and keeps its
    advantages."""
    tr = reference_trainer(seed_reference, tmp_path, advantage_mode=length_baseline, max_completion_length=4)
    first = tr.generator.generate().first
    G = tr.cfg.num_generations
    lengths = first.completion_mask.sum(1).double().view(-1, G).tolist()
    rewards = first.rewards.double().view(-1, G).tolist()
    want = [
        [(sum(ls) / G - n) if r == 1 else 0.0 for n, r in zip(ls, rs, strict=True)]
        for ls, rs in zip(lengths, rewards, strict=True)
    ]
    assert any(any(row) for row in want)  # the case is exercised: some right answers of different lengths
    torch.testing.assert_close(first.advantages.double().view(-1, G), torch.tensor(want, dtype=torch.float64))
    with pytest.raises(ValueError, match="already registered"):
        register_adv_est(length_baseline)(lambda x, cfg: None)
    with pytest.raises(ValueError, match="needs must be among"):
        register_adv_est("other", needs=("logits",))(lambda x, cfg: None)
    assert "other" not in ADV_ESTIMATORS


# ---------------------------------------------------------------------------------------------------------------
# use_kl_in_reward: the advantages see the reward less beta x the sequence's KL to the reference


@torch.no_grad()
def _sequence_kl(policy, ref, batch, G: int, temperature: float) -> torch.Tensor:
    """(n,) per completion row: the sum over its tokens (EOS included) of log pi - log pi_ref at `temperature`, each
    from a plain forward of one unpadded sequence, prompt + completion (no layout, no grouped path, no cache)."""
    kl = []
    for row in range(batch.completion_ids.size(0)):
        g = row // G
        prompt = batch.prompt_ids[g][batch.prompt_mask[g].bool()].tolist()
        completion = batch.completion_ids[row, : int(batch.completion_mask[row].sum())].tolist()
        ids = torch.tensor([prompt + completion])
        logp = [
            torch.log_softmax(m(input_ids=ids).logits[0].double() / temperature, -1) for m in (policy, ref)
        ]
        # the logits at position p predict token p + 1
        at = [(len(prompt) - 1 + j, t) for j, t in enumerate(completion)]
        kl.append(sum(float(logp[0][p, t] - logp[1][p, t]) for p, t in at))
    return torch.tensor(kl, dtype=torch.float64)


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_kl_in_reward_advantages_are_those_of_the_reward_less_beta_times_the_sequence_kl(
    seed_reference, tmp_path, scale_rewards
):
    """use_kl_in_reward: every trained group's advantages (the first round's, computed over the global batch, and
    the explore rounds', computed within their round) are group_advantages of r - beta * sum_t (log pi - log pi_ref),
    the log-probs at the run's temperature (not the explore round's) from plain forwards here. The policy is
    perturbed away from the reference, so the KL is far from 0 (a sign error in the shaping changes the result)."""
    beta, T, G = 0.5, 0.6, 4
    tr = reference_trainer(
        seed_reference,
        tmp_path,
        beta=beta,
        use_kl_in_reward=True,
        temperature=T,
        scale_rewards=scale_rewards,
        per_device_train_batch_size=36 * G,
        explore_rounds=2,
        explore_temperatures=[2.0, 3.0],
        dtype="float64",  # the trainer's KL and the plain forwards here: two orders (tests/_numerics.py)
    )
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=noise))
    batch = tr.generator.generate().batch
    # some groups come from an explore round (sampled hot): Round.shaped_rewards is exercised too
    assert batch.temperature is not None and bool((batch.temperature > T).any())
    kl = _sequence_kl(tr.model.eval(), tr.ref_model.eval(), batch, G, T)
    assert float(kl.abs().max()) > 0.5  # the policy is not the reference
    want, _ = group_advantages(batch.rewards.double() - beta * kl, G, scale_rewards=scale_rewards)
    assert batch.advantages.dtype == torch.float64  # (a float64 run's shaped rewards stay float64)
    assert_same_math(batch.advantages, want)
