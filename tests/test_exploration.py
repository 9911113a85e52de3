"""Where samples are spent: per-prompt statistics, weighted prompt selection, explore rounds and their importance
weights; each against an independent computation, and resume / two processes end to end on the seed bank."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from _numerics import same_math
from _runs import cli, launch_two, reference_trainer, run_inproc
from safetensors.torch import load_file

from tinygrpo.batch import Batch
from tinygrpo.config import ConfigError, GRPOConfig
from tinygrpo.loss import explore_weights
from tinygrpo.loss_config import LossConfig
from tinygrpo.metrics_io import TIMING_PREFIXES, read_jsonl
from tinygrpo.prompt_stats import PromptStats, selection_weights
from tinygrpo.tasks.addition import problem_kinds

# ================================================================================================ statistics


def test_prompt_stats_follow_a_plain_transcription():
    # Rounds of random groups (a prompt may come twice in one round; NaN rewards are left out), folded in by the
    # class and by a dict-based loop written from the definition.
    rng = random.Random(0)
    N, G, ema = 7, 4, 0.3
    stats = PromptStats(N, ema)
    est: dict[int, float] = {}
    samples = [0] * N
    sums = [0.0] * N
    last: dict[int, float] = {}
    for _ in range(12):
        idx = [rng.randrange(N) for _ in range(3)]
        rewards = [rng.choice([0.0, 1.0, 1.0, float("nan")]) for _ in range(len(idx) * G)]
        stats.update(idx, torch.tensor(rewards), G)
        for j, i in enumerate(idx):
            vals = [r for r in rewards[j * G : (j + 1) * G] if r == r]
            if not vals:
                continue
            m = sum(vals) / len(vals)
            est[i] = m if i not in est else (1 - ema) * est[i] + ema * m
            samples[i] += len(vals)
            sums[i] += sum(vals)
            last[i] = m
    for i in range(N):
        if i in est:
            assert float(stats.pass_rate[i]) == pytest.approx(est[i], abs=1e-12)
            assert float(stats.last[i]) == pytest.approx(last[i], abs=1e-12)
        else:
            assert math.isnan(float(stats.pass_rate[i]))
    assert stats.samples.tolist() == samples
    assert stats.reward_sum.tolist() == pytest.approx(sums)
    counts = stats.counts()
    assert counts["prompts/unseen"] == N - len(est)
    assert counts["prompts/unsolved"] == sum(v == 0 for v in last.values())
    assert counts["prompts/solved"] == sum(v == 1 for v in last.values())
    assert counts["prompts/partly_solved"] == sum(0 < v < 1 for v in last.values())


def test_selection_weights_are_the_documented_formulas():
    p = torch.tensor([float("nan"), 0.0, 0.25, 1.0], dtype=torch.float64)
    floor = 0.05
    assert selection_weights(p, "uniform", floor).tolist() == [1.0] * 4
    assert selection_weights(p, "unsolved", floor).tolist() == pytest.approx([1.05, 1.05, 0.8, 0.05])
    assert selection_weights(p, "informative", floor).tolist() == pytest.approx([0.3, 0.05, 0.2375, 0.05])


def _source(sampler: str, pass_rate: list[float], seed: int = 0):
    from tinygrpo.prompts import PromptSource

    class Tok:
        pad_token_id = 0

        def __call__(self, texts):
            return {"input_ids": [[1 + i % 5] for i, _ in enumerate(texts)]}

    class Rows:
        def to_dict(self):
            return {"prompt": [f"p{i}" for i in range(len(pass_rate))]}

    stats = PromptStats(len(pass_rate), 0.5)
    stats.pass_rate = torch.tensor(pass_rate, dtype=torch.float64)
    return PromptSource(Rows(), Tok(), seed, sampler, 0.05, stats)


def test_weighted_selection_draws_prompts_in_proportion_to_their_weights():
    # The first prompt of each draw is taken with probability w_i / sum(w): counted over many cursors, within 5
    # standard errors. A draw of several prompts holds no prompt twice, and a cursor gives the same draw again.
    rates = [0.0, 0.5, 0.9, 1.0, float("nan")]
    src = _source("unsolved", rates)
    w = selection_weights(torch.tensor(rates, dtype=torch.float64), "unsolved", 0.05)
    expected = (w / w.sum()).tolist()
    n = 20_000
    firsts = [src.take(1)[0] for _ in range(n)]
    for i, q in enumerate(expected):
        freq = firsts.count(i) / n
        assert abs(freq - q) < 5 * math.sqrt(q * (1 - q) / n), (i, freq, q)
    src.cursor = 123
    a = src.take(4)
    src.cursor = 123
    assert src.take(4) == a and len(set(a)) == 4


def test_uniform_selection_is_the_permutation_order_it_always_was():
    src = _source("uniform", [0.0] * 6, seed=5)
    order = torch.randperm(6, generator=torch.Generator().manual_seed(5)).tolist()
    assert src.take(6) == order


def test_each_pass_over_the_prompts_is_its_own_permutation_and_a_restored_source_continues_it():
    # Pass e is torch.randperm(n) seeded with seed + e, computed here: every pass holds each prompt once, and two
    # passes differ (the same order every pass would replay one curriculum). Taken in chunks that straddle the
    # passes' ends, the order is the passes one after another; a source restored from state_dict mid-pass (a fresh
    # object, so no cached permutation) continues exactly where the other one is.
    n, seed = 7, 5
    passes = [torch.randperm(n, generator=torch.Generator().manual_seed(seed + e)).tolist() for e in range(4)]
    assert all(sorted(p) == list(range(n)) for p in passes) and passes[0] != passes[1]
    src = _source("uniform", [0.0] * n, seed=seed)
    assert src.take(n) == passes[0] and src.take(n) == passes[1]
    src = _source("uniform", [0.0] * n, seed=seed)
    got = [i for count in (3, 5, 4, 2) for i in src.take(count)]
    assert got == [*passes[0], *passes[1]]
    state = src.state_dict()
    restored = _source("uniform", [0.0] * n, seed=seed)
    restored.load_state_dict(state)
    assert restored.take(5) == src.take(5) == passes[2][:5]
    assert restored.take(n) == src.take(n) == [*passes[2][5:], *passes[3][:5]]


def test_problem_kinds():
    kinds = problem_kinds([3, 47, 55, 12], [40, 38, 45, 3])
    assert kinds["one_digit_operand"] == [True, False, False, True]
    assert kinds["carry"] == [False, True, True, False]
    assert kinds["sum_ge_100"] == [False, False, True, False]


# ================================================================================================ explore rounds


def test_explore_weights_are_truncated_ratios_of_the_two_temperatures():
    # Plain loops: p_T(y) / p_T'(y) per token from the softmax of each row at each temperature, capped at C; rows
    # sampled at the run's temperature weigh exactly 1.
    torch.manual_seed(0)
    n, Tc, V, T, C = 3, 2, 5, 1.0, 3.0
    logits = (
        torch.randn(n, Tc, V, dtype=torch.float64) * 3
    )  # against float64 loops: float64 (tests/_numerics.py)
    ids = torch.randint(0, V, (n, Tc))
    temps = torch.tensor([1.0, 2.0, 0.5])
    batch = Batch(
        torch.zeros(1, 1, dtype=torch.long),
        torch.ones(1, 1, dtype=torch.long),
        ids,
        torch.ones(n, Tc),
        torch.ones(n),
        torch.ones(n),
        temperature=temps,
    )
    cfg = GRPOConfig(temperature=T, explore_importance_sampling_clip_max=C)
    logp = torch.log_softmax(logits / T, -1).gather(-1, ids[..., None])[..., 0]
    got = explore_weights(logits, batch, logp, LossConfig.from_config(cfg))
    for i in range(n):
        for t in range(Tc):
            z = logits[i, t].tolist()
            p = [math.exp(v / T) for v in z]
            q = [math.exp(v / float(temps[i])) for v in z]
            y = int(ids[i, t])
            ratio = (p[y] / sum(p)) / (q[y] / sum(q))
            want = 1.0 if float(temps[i]) == T else min(ratio, C)
            assert float(got[i, t]) == same_math(want)
    assert float(got[0].min()) == float(got[0].max()) == 1.0


def test_a_prompt_whose_samples_all_fail_is_sampled_again_hotter_and_brings_signal(seed_reference, tmp_path):
    # At a near-greedy temperature most groups are G copies of one answer. Explore rounds sample the prompts whose G
    # samples were all wrong again at temperature 3; the groups that then differ are trained on, with the temperature
    # they were sampled at; prompts with a right sample are not sampled again.
    tr = reference_trainer(
        seed_reference,
        tmp_path,
        per_device_train_batch_size=144,
        prompt_sampler="unsolved",
        temperature=0.01,
        explore_rounds=2,
        explore_temperatures=[3.0],
    )
    G = 4
    scored = tr.generator.generate()
    first = scored.first
    groups = first.all_rewards.view(-1, G).tolist()
    failed = [i for i, g in zip(first.idx, groups, strict=True) if max(g) == 0]
    assert failed and len(failed) < len(groups)
    batch = scored.batch
    hot = batch.temperature == 3.0
    assert batch.temperature is not None and int(hot.sum()) > 0
    # (without dynamic sampling the whole first batch is kept; the hot groups come after it, each with signal)
    assert batch.num_groups == len(groups) + int(hot.sum()) // G
    assert bool(batch.advantages[hot].view(-1, G).ne(0).any(1).all())
    explored = scored.num_sampled - first.all_rewards.numel()
    assert len(failed) * G <= explored <= 2 * len(failed) * G
    # the hot groups are of failed prompts only
    texts = tr.tokenizer.batch_decode(batch.prompt_ids[hot.view(-1, G)[:, 0]], skip_special_tokens=True)
    assert set(texts) <= {tr.prompts.texts[i] for i in failed}
    # one update on them moves the policy
    before = [p.detach().clone() for p in tr.model.parameters()]
    tr.update.run(tr.update.prepare(batch))
    assert any(not torch.equal(a, p) for a, p in zip(before, tr.model.parameters(), strict=True))


def test_explore_round_k_samples_at_the_kth_temperature_the_last_one_repeating(
    seed_reference, tmp_path, monkeypatch
):
    # A reward staged by round: in the first round only the first prompt's group has signal (so the best reward is
    # 1 and every other prompt failed); in explore round k only the prompt k + 1 of the first round's order gets a
    # group with signal. So prompt i is found in round i - 1, and the prompts left are sampled again each round.
    # BatchGenerator.sample is wrapped to record what each round samples and at which temperature.
    G, temps = 4, [1.5, 2.5, 3.5]
    calls: list[tuple[list[int], float]] = []

    def recording(idx: list[int], temperature: float):
        calls.append((list(idx), temperature))
        return sample(idx, temperature)

    def staged(completions: list[str], prompts: list[str], **kw) -> list[float]:
        if not calls:  # the trainer's start-up probe of every reward on every row, before any round
            return [0.0] * len(completions)
        order = [tr.prompts.texts[i] for i in calls[0][0]]  # the first round's prompts
        lucky = len(calls) - 1  # the first round: prompt 0; explore round k (call k + 1): prompt k + 1
        return [float(order.index(p) == lucky and j % G == 0) for j, p in enumerate(prompts)]

    tr = reference_trainer(
        seed_reference,
        tmp_path,
        reward_funcs=[staged],
        per_device_train_batch_size=8 * G,
        explore_rounds=4,
        explore_temperatures=temps,
    )
    sample = tr.generator.sample
    monkeypatch.setattr(tr.generator, "sample", recording)
    batch = tr.generator.generate().batch
    first = calls[0][0]
    assert len(first) == 8
    # round k samples the prompts not found yet at explore_temperatures[min(k, 2)]
    assert calls == [
        (first, tr.cfg.temperature),
        (first[1:], 1.5),
        (first[2:], 2.5),
        (first[3:], 3.5),
        (first[4:], 3.5),
    ]
    # the trained batch: the first round's 8 groups at the run's temperature (no dynamic sampling), then the group
    # each explore round found, every row at the temperature it was sampled at
    want = [tr.cfg.temperature] * 8 * G + [t for t in (1.5, 2.5, 3.5, 3.5) for _ in range(G)]
    assert batch.temperature is not None and batch.temperature.tolist() == want
    found = tr.tokenizer.batch_decode(batch.prompt_ids[8:], skip_special_tokens=True)
    assert found == [tr.prompts.texts[i] for i in first[1:5]]


def test_without_explore_rounds_no_failed_prompt_is_sampled_again(seed_reference, tmp_path):
    tr = reference_trainer(seed_reference, tmp_path, per_device_train_batch_size=144, temperature=0.05)
    scored = tr.generator.generate()
    assert scored.num_sampled == scored.first.all_rewards.numel()
    assert scored.batch.temperature is None


# ================================================================================================ end to end


def test_resume_with_weighted_selection_and_explore_rounds_continues_exactly(seed_reference, tmp_path):
    out, straight = tmp_path / "resumed", tmp_path / "straight"
    common = (
        *"--save_steps 2 --lr_scheduler_type constant --logging_steps 1 --dynamic_sampling true".split(),
        *("--eval_split", ""),  # (a run that ends at step 4 evaluates there; the straight one does not)
        *"--prompt_sampler unsolved --explore_rounds 2 --explore_temperatures 1.5 3.0".split(),
    )
    assert run_inproc(seed_reference, out, *common, "--max_steps", "4") == 0
    stats = _prompt_stats(out / "checkpoint-4", 0)
    assert int(stats["samples"].sum()) > 0
    assert (
        run_inproc(seed_reference, out, *common, *"--max_steps 6 --resume_from_checkpoint latest".split())
        == 0
    )
    assert run_inproc(seed_reference, straight, *common, "--max_steps", "6") == 0

    def rows(path):
        keep = [r for r in read_jsonl(path / "metrics.jsonl") if r["step"] > 0]
        return [{k: v for k, v in r.items() if not k.startswith(TIMING_PREFIXES)} for r in keep]

    got, want = rows(out), rows(straight)
    assert got == want and "prompts/unsolved" in got[-1] and "frac_completions_with_signal" in got[-1]
    a, b = _prompt_stats(out / "checkpoint-6", 0), _prompt_stats(straight / "checkpoint-6", 0)
    assert a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)  # (NaN: a prompt not yet seen)
    m = load_file(str(out / "final" / "model.safetensors"))
    n = load_file(str(straight / "final" / "model.safetensors"))
    assert all(torch.equal(m[k], n[k]) for k in m)


@pytest.mark.slow
def test_two_processes_hold_the_same_prompt_statistics(seed_reference, tmp_path):
    out = tmp_path / "two"
    argv = cli(
        seed_reference,
        out,
        *"--max_steps 3 --save_steps 0 --prompt_sampler unsolved --dynamic_sampling false".split(),
    )
    proc = launch_two([*argv, "--per_device_train_batch_size", "16", "--explore_rounds", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = _prompt_stats(out / "checkpoint-3", 0), _prompt_stats(out / "checkpoint-3", 1)
    assert (
        int(a["samples"].sum()) == 3 * 32
    )  # every step's global batch: 4 prompts x 4 samples on each process
    assert all(_same(a[k], b[k]) for k in a)


def _prompt_stats(checkpoint: Path, rank: int) -> dict[str, torch.Tensor]:
    """One process's per-prompt statistics in a checkpoint (the batch generator's tensors)."""
    tensors = load_file(str(checkpoint / f"batch_generator_{rank}.safetensors"))
    return {k.removeprefix("stats/"): v for k, v in tensors.items() if k.startswith("stats/")}


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    return bool(((x == y) | (x.isnan() & y.isnan())).all())


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--prompt_sampler", "hardest", "prompt_sampler='hardest' is not one of"),
        ("--prompt_sampler_floor", "0", "prompt_sampler_floor must be > 0"),
        ("--pass_rate_ema", "1.5", "pass_rate_ema must be in (0, 1]"),
        ("--explore_rounds", "-1", "explore_rounds must be >= 0"),
        ("--explore_temperatures", "0", "explore_temperatures must be positive"),
        ("--explore_importance_sampling_clip_max", "0", "explore_importance_sampling_clip_max must be > 0"),
    ],
)
def test_bad_exploration_settings_are_one_line_errors(flag, value, message):
    from tinygrpo.config import parse_config

    with pytest.raises(ConfigError, match=None) as e:
        parse_config([flag, value])
    assert message in str(e.value)


@pytest.mark.slow
def test_exploration_study_runs_its_arms_and_writes_a_table_of_their_numbers(seed_reference, tmp_path):
    from studies import exploration

    out, docs = tmp_path / "study", tmp_path / "docs"
    argv = ["--arms", "default", "uniform", "--seeds", "1", "--max_steps", "4", "--eval_steps", "2"]
    argv += ["--model_name_or_path", seed_reference, "--output_dir", str(out), "--docs", str(docs)]
    assert exploration.main(argv) == 0
    data = json.loads((out / "exploration.json").read_text())
    rows = {r["arm"]: r for r in data["rows"]}
    assert set(rows) == {"default", "uniform"}
    for arm, row in rows.items():
        metrics = read_jsonl(out / f"{arm}-seed1" / "metrics.jsonl")
        last_eval = [r for r in metrics if "eval/accuracy" in r][-1]
        assert row["val_final"] == [last_eval["eval/accuracy"]] and last_eval["step"] == 4
        assert 0 <= row["test_final"][0] <= 1
    text = (docs / "exploration.md").read_text()
    assert f"| default | {rows['default']['val_final'][0]:.1%} |" in text
    assert (docs / "exploration.png").stat().st_size > 0
    # the docs are written again from the JSON alone, the same
    (docs / "exploration.md").unlink()
    assert exploration.main([*argv, "--rewrite_docs"]) == 0
    assert (docs / "exploration.md").read_text() == text


def test_study_per_seed_table_counts_a_seed_that_never_gets_there_as_infinitely_late():
    from studies.exploration import per_seed_table

    # [step, seconds, completions, accuracy]; seed 2 never reaches 99 %, seed 1 reaches it, then falls back
    runs = [
        {"eval": [[0, 0.0, 0, 0.9], [10, 1.5, 100, 0.995], [20, 3.0, 200, 0.97]]},
        {"eval": [[0, 0.0, 0, 0.9], [10, 2.0, 150, 0.98], [20, 4.0, 300, 0.985]]},
        {"eval": [[0, 0.0, 0, 0.9], [10, 2.5, 130, 0.99], [20, 5.0, 260, 0.999]]},
    ]
    table = per_seed_table({"arm": runs}, 0.99)
    assert table[2] == "| arm | 1.5 / - / 2.5 | 2.5 | 100 / - / 130 | 130 |"
    # two seeds of three that never get there: the median is not reached
    table = per_seed_table({"arm": [runs[1], runs[1], runs[2]]}, 0.99)
    assert table[2] == "| arm | - / - / 2.5 | not reached | - / - / 130 | not reached |"


def test_sample_efficiency_study_arms_each_change_one_setting_of_the_default_or_combine_two_arms():
    from studies.sample_efficiency import ARMS
    from tinygrpo.config import parse_config

    default = parse_config([])

    def changed(flags: list[str]) -> dict:
        return {k: v for k, v in vars(parse_config(flags)).items() if v != getattr(default, k)}

    for arm, (flags, what) in ARMS.items():
        # a combination: exactly the changes of two other single-change arms, which do not overlap
        if " + " in arm:
            parts = arm.split(" + ")
            assert len(parts) == 2 and all(p in ARMS for p in parts), arm
            a, b = (changed(ARMS[p][0]) for p in parts)
            assert len(a) == len(b) == 1 and a.keys().isdisjoint(b), arm
            assert changed(flags) == a | b, arm
        else:
            assert len(changed(flags)) == (0 if arm == "default" else 1), (arm, changed(flags))
        assert what
