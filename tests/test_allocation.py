"""sample_allocation (tinygrpo/allocation.py): the knapsack against a brute-force search, the pass-rate estimates it
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

from tinygrpo.advantage_estimators import AdvantageConfig, AdvantageInputs, compute_advantages
from tinygrpo.allocation import knapsack_units, knapsack_value, pass_rate_estimates, signal_probability
from tinygrpo.checks import ConfigError
from tinygrpo.config import GRPOConfig
from tinygrpo.group_sizes import rows_of
from tinygrpo.metrics_io import read_jsonl


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
    cfg = AdvantageConfig("grpo", 2, "group")
    for j, k in enumerate(want):
        rows = rows_of(torch.tensor([j]), want, 2)
        a, z = compute_advantages(
            AdvantageInputs(r.rewards[rows]), AdvantageConfig(cfg.advantage_mode, 2 * k)
        )
        assert torch.equal(r.advantages[rows], a) and bool(r.zero_std[j]) == bool(z[0])
        assert bool(r.has_signal[sum(want[:j])]) == (not bool(z[0]))
    assert (stats.samples - before)[nxt].tolist() == [2 * k for k in want]
    (mb,) = tr.update.prepare(r.batch)
    loss, _ = tr.update.loss(mb)
    assert torch.isfinite(loss)


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
        a, z = compute_advantages(AdvantageInputs(r.rewards[rows]), AdvantageConfig("grpo", k * U))
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
        a, z = compute_advantages(AdvantageInputs(r.rewards[rows]), AdvantageConfig("grpo", k * U))
        assert torch.equal(r.advantages[rows], a) and bool(r.zero_std[j]) == bool(z[0])
    assert (tr.prompt_stats.samples - before)[nxt].tolist() == [U * k for k in want]
    assert r.completion_ids.size(0) == U * sum(want) and r.completion_mask.shape == r.completion_ids.shape


def test_refills_take_whole_groups_until_the_batch_is_full_the_last_one_past_it():
    """Dynamic sampling under a rule: a round's groups with signal are taken in order until `room` rows are filled;
    a group is never cut, so a round with a group with signal always adds one (a room smaller than every group would
    otherwise leave the remaining refill rounds sampled for nothing)."""
    from tinygrpo.generation import signal_rows
    from tinygrpo.round import Round

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

    from tinygrpo.metrics_io import read_jsonl

    (tmp_path / "r.py").write_text(
        "import os\n"
        "def rank0(completions, **kw):\n"
        "    mine = os.environ.get('RANK', '0') == '0'\n"
        "    return [float(i % 2) if mine else 0.0 for i in range(len(completions))]\n"
    )
    argv = ["--model_name_or_path", seed_reference, *"--dataset seed_bank --eval_split".split(), ""]
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
