"""sample_allocation (tinygrpo/algorithm/allocation.py): the knapsack against a brute-force search, the pass-rate estimates it
reads, a round of the trainer under each rule (the until-signal rule against its play-out on scripted outcomes): its
groups' sizes, advantages and statistics, and its refusals."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from _runs import reference_trainer
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygrpo.algorithm.advantage_estimators import AdvantageConfig, AdvantageInputs, compute_advantages
from tinygrpo.algorithm.allocation import (
    knapsack_units,
    knapsack_value,
    pass_rate_estimates,
    signal_probability,
)
from tinygrpo.algorithm.group_sizes import rows_of
from tinygrpo.base.options import ConfigError
from tinygrpo.run.config import GRPOConfig
from tinygrpo.run.logs import read_jsonl


def _total(p: torch.Tensor, units: list[int], unit: int) -> float:
    n = torch.tensor(units, dtype=torch.float64) * unit
    return float(knapsack_value(p.double(), n).sum())


@settings(max_examples=60, deadline=None)
@given(
    ps=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4),
    unit=st.sampled_from([1, 2, 4]),
    max_units=st.integers(1, 4),
    data=st.data(),
)
def test_knapsack_matches_the_best_of_every_allocation(ps, unit, max_units, data):
    """The marginal-gain rule against a search over every allocation of the budget: the same summed value (the
    allocation itself may differ where values tie)."""
    p = torch.tensor(ps, dtype=torch.float64)
    budget = data.draw(st.integers(len(ps), len(ps) * max_units))
    got = knapsack_units(p, budget, unit, max_units)
    assert sum(got) == budget and all(1 <= k <= max_units for k in got)
    best = max(
        _total(p, list(a), unit)
        for a in itertools.product(range(1, max_units + 1), repeat=len(ps))
        if sum(a) == budget
    )
    assert _total(p, got, unit) == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_knapsack_gives_the_uncertain_prompts_the_samples():
    """Solved and hopeless prompts keep one unit; the budget goes where a sample is worth most; equal estimates
    split it evenly."""
    p = torch.tensor([0.999, 0.5, 0.2, 0.001])
    units = knapsack_units(p, budget=8, unit=2, max_units=8)
    assert units[0] == 1 and units[3] == 1 and units[1] + units[2] == 6
    assert knapsack_units(torch.full((4,), 0.5), budget=8, unit=2, max_units=8) == [2, 2, 2, 2]
    with pytest.raises(ValueError, match="cannot give 4 prompts"):
        knapsack_units(p, budget=3, unit=2, max_units=8)


def test_signal_probability_is_one_minus_the_two_uniform_outcomes():
    p, n = torch.tensor([0.0, 1.0, 0.5, 0.9]), torch.tensor(4.0)
    assert signal_probability(p, n).tolist() == pytest.approx([0.0, 0.0, 1 - 2 / 16, 1 - 0.9**4 - 0.1**4])


def test_pass_rate_estimates_keep_off_the_ends_and_fill_the_unseen():
    ema = torch.tensor([1.0, 0.0, 0.3, float("nan")], dtype=torch.float64)
    samples = torch.tensor([7, 31, 8, 0])
    est = pass_rate_estimates(ema, samples)
    assert est[0] == 1 - 0.5 / 8 and est[1] == 0.5 / 32 and est[2] == 0.3
    assert est[3] == pytest.approx((1.0 + 0.0 + 0.3) / 3)  # the seen ones' mean (the EMAs, unclamped)
    assert pass_rate_estimates(torch.full((2,), float("nan")), torch.zeros(2)).tolist() == [0.5, 0.5]


def test_a_knapsack_round_samples_each_prompt_its_units_and_scores_each_group_as_a_whole(
    seed_reference, tmp_path
):
    """Prompt statistics set by hand: the round's groups have the sizes the knapsack gives, their rows are their
    prompt's, each group's advantages are the estimator's on that group alone, and the statistics fold in whole
    groups."""
    tr = reference_trainer(
        seed_reference,
        tmp_path,
        sample_allocation="knapsack",
        allocation_unit=2,
        max_num_generations=8,
        temperature=1.5,
    )
    gen, stats = tr.generator, tr.prompt_stats
    P = tr.cfg.per_device_train_batch_size // tr.cfg.num_generations  # 16 prompts, 4 samples each on average
    order = torch.randperm(len(tr.prompts), generator=torch.Generator().manual_seed(0))
    stats.pass_rate[:] = torch.linspace(0.0, 1.0, len(tr.prompts), dtype=torch.float64)[order]
    stats.samples[:] = 8
    before = stats.samples.clone()
    nxt = tr.prompts.take(P)
    tr.prompts.cursor -= P  # (the round takes them again)
    want = knapsack_units(pass_rate_estimates(stats.pass_rate[nxt], stats.samples[nxt]), P * 4 // 2, 2, 4)
    assert len(set(want)) > 1  # (the test needs groups of several sizes)
    r = gen.round()
    assert r.sizes == want and r.all_sizes == want and r.zero_std.shape == (P,)
    assert r.idx == [i for i, k in zip(nxt, want, strict=True) for _ in range(k)]
    assert r.completion_ids.size(0) == 2 * sum(want) == P * 4
    cfg = AdvantageConfig(advantage_mode="grpo", scale_rewards="group")
    for j, k in enumerate(want):
        rows = rows_of(torch.tensor([j]), want, 2)
        a, z = compute_advantages(AdvantageInputs(r.rewards[rows], 2 * k), cfg)
        assert torch.equal(r.advantages[rows], a) and bool(r.zero_std[j]) == bool(z[0])
        assert bool(r.has_signal[sum(want[:j])]) == (not bool(z[0]))
    assert (stats.samples - before)[nxt].tolist() == [2 * k for k in want]
    (mb,) = tr.update.prepare(r.batch)
    loss, _ = tr.update.loss(mb)
    assert torch.isfinite(loss)


@pytest.mark.slow
@pytest.mark.parametrize("allocation", ["knapsack", "screen", "until_signal"])
def test_an_allocated_run_with_refills_and_explore_rounds_trains_and_logs(
    seed_reference, tmp_path, allocation
):
    """Three steps under the default's sampling (dynamic sampling, explore rounds, the unsolved sampler) with each
    rule: refills keep whole groups with signal, explore rounds sample G of each failed group, the metrics are
    logged."""
    tr = reference_trainer(
        seed_reference,
        tmp_path,
        sample_allocation=allocation,
        allocation_unit=2,
        dynamic_sampling=True,
        explore_rounds=2,
        prompt_sampler="unsolved",
        max_steps=3,
        logging_steps=1,
        save_steps=0,
    )
    for _ in range(2):
        scored = tr.generator.generate()
        b = scored.batch
        assert b.completion_ids.size(0) == 2 * b.num_groups and b.advantages.ne(0).any()
    tr.train()
    rows = [r for r in read_jsonl(Path(tr.cfg.output_dir) / "metrics.jsonl") if "reward_std" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(0 < r["frac_completions_with_signal"] <= 1 and r["reward_std"] > 0 for r in rows)


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"allocation_unit": 3}, "allocation_unit=3 must divide num_generations=8"),
        ({"max_num_generations": 4}, "max_num_generations must be at least num_generations"),
        ({"scale_rewards": "batch"}, "reads the whole batch"),
        ({"advantage_mode": "reinforce_pp"}, "reads the whole batch"),
        ({"advantage_mode": "pass_at_k", "train_pass_k": 4}, "train_pass_k < allocation_unit=4"),
    ],
)
def test_allocation_errors_name_the_fields(fields, match):
    with pytest.raises(ConfigError, match=match):
        GRPOConfig(num_generations=8, sample_allocation="knapsack", **fields)
    GRPOConfig(
        num_generations=8, **{k: v for k, v in fields.items() if k != "max_num_generations"}
    )  # fixed: fine


def test_a_screen_round_spends_whole_groups_where_the_screen_differs(seed_reference, tmp_path):
    """sample_allocation screen: every prompt's first unit, then the rest of a group of G for the prompts whose
    unit's rewards differ or whose estimate says solved but rarely. Each row of the merged round is its prompt's,
    its reward is its completion's, each group's advantages are the estimator's on that group alone."""
    tr = reference_trainer(
        seed_reference, tmp_path, sample_allocation="screen", allocation_unit=2, temperature=1.5
    )
    gen, stats, U, G = tr.generator, tr.prompt_stats, 2, tr.cfg.num_generations
    P = tr.cfg.per_device_train_batch_size // G
    nxt = tr.prompts.take(P)
    tr.prompts.cursor -= P
    stats.pass_rate[nxt[0]] = 0.2  # solved before, rarely: a whole group whatever its screen says
    stats.pass_rate[nxt[1]] = 1.0  # solved: a whole group only if its screen differs
    r = gen.round()
    assert len(r.sizes) == P and set(r.sizes[1:]) == {1, G // U} and r.sizes[0] == G // U  # (both kinds here)
    heads = [sum(r.sizes[:j]) for j in range(P)]
    assert [r.idx[h] for h in heads] == nxt and r.idx == [
        i for i, k in zip(nxt, r.sizes, strict=True) for _ in range(k)
    ]
    for j, k in enumerate(r.sizes):
        rows = rows_of(torch.tensor([j]), r.sizes, U)
        screen = r.rewards[rows[:U]]
        if j > 0:  # (the hard prompt continues regardless)
            assert (k > 1) == bool(screen.max() > screen.min())
        a, z = compute_advantages(
            AdvantageInputs(r.rewards[rows], k * U), AdvantageConfig(advantage_mode="grpo")
        )
        assert torch.equal(r.advantages[rows], a) and bool(r.zero_std[j]) == bool(z[0])
    texts = tr.prompts.texts
    assert r.prompts == [texts[i] for i in r.idx for _ in range(U)]
    rescored = tr.generator.rewards.funcs[0](
        prompts=r.prompts,
        completions=r.completions,
        answer=[tr.prompts.columns["answer"][i] for i in r.idx for _ in range(U)],
    )
    assert [float(x) for x in rescored] == r.rewards.tolist()
    assert r.completion_ids.size(0) == U * sum(r.sizes) and r.completion_mask.shape == r.completion_ids.shape


def _scripted(prompt: str) -> int | None:
    """The sample (1-based, in the order a prompt's samples are scored) from which on a prompt is right; None:
    never. From the prompt's text alone, so that the outcomes do not depend on the model: always right (1), right
    from the first sample of the second unit of 2 (3: no unit alone differs, the two together do), from the second
    sample of the third (6), never."""
    return (None, 1, 3, 6)[sum(map(ord, prompt)) % 4]


def _until_signal_oracle(targets: list[int | None], U: int, cap_units: int, budget_units: int) -> list[int]:
    """sample_allocation until_signal played out on scripted outcomes: units per prompt, pass by pass."""
    units = [1] * len(targets)
    room = budget_units - len(targets)

    def differ(j: int) -> bool:  # a wrong sample, then a right one
        return targets[j] is not None and 1 < targets[j] <= units[j] * U

    while room > 0:
        todo = [j for j in range(len(targets)) if not differ(j) and units[j] < cap_units][:room]
        if not todo:
            break
        for j in todo:
            units[j] += 1
        room -= len(todo)
    return units


@pytest.mark.parametrize(
    "G,cap,binds",
    [(8, 8, "the cap"), (8, 32, "the budget")],
)
def test_an_until_signal_round_samples_each_prompt_until_its_rewards_differ(
    seed_reference, tmp_path, G, cap, binds
):
    """sample_allocation until_signal on scripted rewards (each prompt right from a sample its text sets on, or
    never): each group's size is what playing the rule out on those outcomes gives, its rewards are its own
    samples' in the order they were drawn, its advantages the estimator's on the group alone; the statistics fold
    in whole groups."""
    seen: dict[str, int] = {}

    def scripted(prompts, completions, **kw):
        out = []
        for p in prompts:
            seen[p] = seen.get(p, 0) + 1
            t = _scripted(p)
            out.append(float(t is not None and seen[p] >= t))
        return out

    U = 2
    tr = reference_trainer(
        seed_reference,
        tmp_path,
        reward_funcs=[scripted],
        sample_allocation="until_signal",
        allocation_unit=U,
        num_generations=G,
        max_num_generations=cap,
    )
    P = tr.cfg.per_device_train_batch_size // G
    nxt = tr.prompts.take(P)
    tr.prompts.cursor -= P
    texts = [tr.prompts.texts[i] for i in nxt]
    targets = [_scripted(x) for x in texts]
    want = _until_signal_oracle(targets, U, cap // U, P * G // U)
    if binds == "the cap":
        assert max(want) == cap // U and sum(want) < P * G // U
    else:
        assert sum(want) == P * G // U and max(want) > 3  # (more than three passes)
    seen.clear()
    before = tr.prompt_stats.samples.clone()
    r = tr.generator.round()
    assert r.sizes == want and r.all_sizes == want
    assert r.idx == [i for i, k in zip(nxt, want, strict=True) for _ in range(k)]
    assert r.prompts == [tr.prompts.texts[i] for i in r.idx for _ in range(U)]
    for j, k in enumerate(want):
        rows = rows_of(torch.tensor([j]), want, U)
        t = targets[j]
        assert r.rewards[rows].tolist() == [float(t is not None and s >= t) for s in range(1, k * U + 1)]
        a, z = compute_advantages(
            AdvantageInputs(r.rewards[rows], k * U), AdvantageConfig(advantage_mode="grpo")
        )
        assert torch.equal(r.advantages[rows], a) and bool(r.zero_std[j]) == bool(z[0])
    assert (tr.prompt_stats.samples - before)[nxt].tolist() == [U * k for k in want]
    assert r.completion_ids.size(0) == U * sum(want) and r.completion_mask.shape == r.completion_ids.shape


def test_refills_take_whole_groups_until_the_batch_is_full_the_last_one_past_it():
    """Dynamic sampling under a rule: a round's groups with signal are taken in order until `room` rows are filled;
    a group is never cut, so a round with a group with signal always adds one (a room smaller than every group would
    otherwise leave the remaining refill rounds sampled for nothing)."""
    from tinygrpo.rollout.refill import signal_rows
    from tinygrpo.rollout.round import Round

    sizes = [2, 1, 3, 2]  # prompt rows: 0-1, 2, 3-5, 6-7
    signal = torch.tensor([True, False, True, True])  # per group
    r = Round.__new__(Round)
    r.sizes, r.has_signal = sizes, signal.repeat_interleave(torch.tensor(sizes))
    assert signal_rows(r, 1).tolist() == [0, 1]  # the first group, past the room
    assert signal_rows(r, 2).tolist() == [0, 1]
    assert signal_rows(r, 3).tolist() == [0, 1, 3, 4, 5]
    assert signal_rows(r, 100).tolist() == [0, 1, 3, 4, 5, 6, 7]
    assert signal_rows(r, 0).tolist() == []


@pytest.mark.slow
def test_a_screen_on_two_processes_whose_rows_differ_runs_and_logs(seed_reference, tmp_path):
    """Rank 0's rewards alternate (every screen differs: whole groups), rank 1's are all 0 (every screen alike: one
    unit each): the processes hold different numbers of rows, which every gather of the step (rewards, lengths,
    per-function rewards, the metrics) takes as they are."""
    from _runs import launch_two

    from tinygrpo.run.logs import read_jsonl

    (tmp_path / "r.py").write_text(
        "import os\n"
        "def rank0(completions, **kw):\n"
        "    mine = os.environ.get('RANK', '0') == '0'\n"
        "    return [float(i % 2) if mine else 0.0 for i in range(len(completions))]\n"
    )
    argv = [
        "--model_name_or_path",
        seed_reference,
        *"--dataset_name seed_bank --dataset_test_split".split(),
        "",
    ]
    argv += (
        "--num_generations 4 --max_completion_length 3 --max_steps 2 --logging_steps 1 --save_steps 0".split()
    )
    argv += "--disable_tqdm true --make_plots false --dynamic_sampling false --explore_rounds 0".split()
    argv += ["--reward_funcs", f"{tmp_path / 'r.py'}:rank0", "--per_device_train_batch_size", "16"]
    argv += "--sample_allocation screen --allocation_unit 2 --torch_num_threads 1".split()
    proc = launch_two([*argv, "--output_dir", str(tmp_path / "two")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [r for r in read_jsonl(tmp_path / "two" / "metrics.jsonl") if "reward" in r]
    # rank 0: 4 prompts x 4 samples, half right; rank 1: 4 prompts x 2 samples, none: 8 right of 24
    assert [r["step"] for r in rows] == [1, 2] and rows[0]["reward"] == pytest.approx(8 / 24)
    assert rows[0]["frac_reward_zero_std"] == 0.5


# ------------------------------------------------------------------------------------------------ the passes, scripted


def _round(
    idx: list[int], U: int, rewards: list[list[float]], width: int = 3, prompt_width: int = 2, tools=False
):
    """A scored round of `U` completions of each prompt of `idx` with these rewards (None: the reward does not
    apply), the tensors of the widths given (what the rules and `merged` read)."""
    from tinygrpo.rollout.round import Round

    P, flat = len(idx), [float("nan") if r is None else r for rs in rewards for r in rs]
    n = P * U
    return Round(
        idx=list(idx),
        prompt_ids=torch.arange(P * prompt_width).view(P, prompt_width) + 100,
        prompt_mask=torch.ones(P, prompt_width, dtype=torch.long),
        completion_ids=torch.arange(n * width).view(n, width),
        completion_mask=torch.ones(n, width),
        is_eos=torch.ones(n, dtype=torch.bool),
        lengths=torch.full((n,), width),
        seconds_generate=0.0,
        tool_mask=torch.ones(n, width, dtype=torch.bool) if tools else None,
        tool_calls=torch.ones(n, dtype=torch.long) if tools else None,
        tool_failures=torch.zeros(n, dtype=torch.long) if tools else None,
        prompts=[""] * n,
        completions=[""] * n,
        rewards_per_func=torch.tensor(flat)[:, None],
        rewards=torch.tensor(flat),
    )


def _cfg(**kw):
    from types import SimpleNamespace

    return SimpleNamespace(**{"unit": 2, "beta": 0.0, "screen_hard_below": 0.5, "num_generations": 4, **kw})


def test_a_screen_spends_the_group_on_a_mixed_or_hard_prompt_never_on_one_never_solved():
    """Pass-rate estimate exactly 0 (never solved) is not 'hard': its alike screen stays alone; 0.3 is hard; a
    mixed screen always goes on; NaN (unseen) is neither."""
    from tinygrpo.rollout.passes import screen

    calls = []

    def sample(idx, sizes):
        calls.append(list(idx))
        screens = {0: [0.0, 0.0], 1: [0.0, 0.0], 2: [0.0, 1.0], 3: [1.0, 1.0]}
        return _round(idx, 2, [screens[i] if len(calls) == 1 else [0.0, 0.0] for i in idx])

    pass_rate = torch.tensor([0.0, 0.3, float("nan"), float("nan")])
    r = screen(sample, [0, 1, 2, 3], _cfg(), pass_rate, pad_id=0)
    assert calls == [[0, 1, 2, 3], [1, 2]] and r.sizes == [1, 2, 2, 1]


def test_a_unit_with_none_differs_by_its_valid_rewards_and_a_unit_of_nones_never_does():
    """[None, 0, 1, 0] differs (0 and 1); [None, None, None, None] has no two valid rewards: alike, under screen
    (no more samples) and until_signal (sampled again until the cap)."""
    from tinygrpo.rollout.passes import reward_range, screen, until_signal

    lo, hi = reward_range(torch.tensor([[float("nan"), 0.0, 1.0, 0.0], [float("nan")] * 4]))
    assert (hi > lo).tolist() == [True, False]
    units = {0: [None, 0.0, 1.0, 0.0], 1: [None] * 4}
    passes = []

    def sample(idx, sizes):
        passes.append(list(idx))
        return _round(idx, 4, [units[i] for i in idx])

    cfg = _cfg(unit=4, num_generations=8, max_num_generations=16)
    screened = screen(sample, [0, 1], cfg, torch.full((2,), float("nan")), pad_id=0)
    assert passes == [[0, 1], [0]] and screened.sizes == [2, 1]
    passes.clear()
    until = until_signal(sample, [0, 1], cfg, pad_id=0)
    # (the budget is P x G = 4 units, 2 spent by the first pass: prompt 1 gets both that are left)
    assert passes == [[0, 1], [1], [1]] and until.sizes == [1, 3]


@pytest.mark.parametrize("tools", [False, True])
def test_a_merged_round_pads_prompts_left_and_completions_right_keeping_each_rows_tokens(tools):
    """Passes of other widths merged into one round (tinygrpo/rollout/round.py merged): each row's prompt, ending
    at the right edge, and its completion, starting at the left, are its pass's own; padding is pad (masked 0),
    and the environment's token mask is False there."""
    from tinygrpo.rollout.round import merged

    first = _round([10, 11], 2, [[0.0, 1.0], [0.0, 0.0]], width=3, prompt_width=2, tools=tools)
    more = _round([11], 2, [[1.0, 0.0]], width=5, prompt_width=4, tools=tools)
    r = merged(first, [more], [[1]], pad_id=0)
    assert r.idx == [10, 11, 11] and r.sizes == [1, 2]
    assert r.prompt_ids.shape == (3, 4) and r.completion_ids.shape == (6, 5)
    rows = [(first, 0), (first, 1), (first, 2), (first, 3), (more, 0), (more, 1)]  # group 0, then group 1's
    units = [(first, 0), (first, 1), (more, 0)]
    for k, (src, i) in enumerate(units):
        w = src.prompt_ids.size(1)
        assert (
            r.prompt_ids[k, -w:].tolist() == src.prompt_ids[i].tolist() and (r.prompt_ids[k, :-w] == 0).all()
        )
        assert r.prompt_mask[k].tolist() == [0] * (4 - w) + [1] * w
    for k, (src, i) in enumerate(rows):
        w = src.completion_ids.size(1)
        assert r.completion_ids[k, :w].tolist() == src.completion_ids[i].tolist()
        assert (r.completion_ids[k, w:] == 0).all() and (r.completion_mask[k, w:] == 0).all()
        assert r.rewards[k].item() == src.rewards[i].item()
        if tools:
            assert r.tool_mask[k, :w].all() and not r.tool_mask[k, w:].any()


@pytest.mark.parametrize("grouped", [False, True])
def test_a_merged_rounds_log_probs_are_each_passs_own(model64, grouped):
    """The per-token log-probs of a merged round (prompts re-padded left, completions right) equal those of each
    pass scored alone, on the trainer's scoring path, in float64 (tests/_numerics.py: other sums, same math)."""
    from tinygrpo.algorithm.core import selective_log_softmax
    from tinygrpo.model.backend import select_backend
    from tinygrpo.rollout.round import merged
    from tinygrpo.rollout.sampling import completion_logits

    g = torch.Generator().manual_seed(0)

    def tokens(r):  # (ids of the model's vocabulary, past <pad> and <eos>)
        r.prompt_ids = torch.randint(2, 14, r.prompt_ids.shape, generator=g)
        r.completion_ids = torch.randint(2, 14, r.completion_ids.shape, generator=g)
        return r

    first = tokens(_round([10, 11], 2, [[0.0, 1.0], [0.0, 0.0]], width=3, prompt_width=2))
    more = tokens(_round([11], 2, [[1.0, 0.0]], width=5, prompt_width=4))
    backend = select_backend(model64, prefer_grouped=grouped)

    def logp(r):
        logits = completion_logits(
            model64, r.prompt_ids, r.prompt_mask, r.completion_ids, 2, r.completion_mask, backend
        )
        return selective_log_softmax(logits, r.completion_ids)

    got = logp(merged(first, [more], [[1]], pad_id=0))
    alone = [(logp(first), k) for k in range(4)] + [(logp(more), k) for k in range(2)]
    for row, (want, k) in enumerate(alone):
        w = want.size(1)
        assert torch.allclose(got[row, :w], want[k], rtol=1e-12, atol=1e-12), row
