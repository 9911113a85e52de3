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

from tinygrpo.algorithm.policy_losses import LossConfig
from tinygrpo.data.tasks.addition import problem_kinds
from tinygrpo.rollout.prompts import PromptStats, selection_weights
from tinygrpo.rollout.round import Batch
from tinygrpo.run.config import ConfigError, GRPOConfig
from tinygrpo.run.logs import TIMING_PREFIXES, read_jsonl
from tinygrpo.update.loss_terms import explore_weights

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
    from tinygrpo.rollout.prompts import PromptSource

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
    got = explore_weights(logits, batch, logp, LossConfig.of(cfg), cfg.temperature)
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

    def recording(idx: list[int], temperature: float, sizes: list[int] | None = None):
        calls.append((list(idx), temperature))
        return sample(idx, temperature, sizes)

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
    sample = tr.generator.draw  # (every round draws its completions here, the first and the explore rounds)
    monkeypatch.setattr(tr.generator, "draw", recording)
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


@pytest.mark.slow
def test_resume_with_weighted_selection_and_explore_rounds_continues_exactly(seed_reference, tmp_path):
    out, straight = tmp_path / "resumed", tmp_path / "straight"
    common = (
        *"--save_steps 2 --lr_scheduler_type constant --logging_steps 1 --dynamic_sampling true".split(),
        *(
            "--dataset_test_split",
            "",
        ),  # (a run that ends at step 4 evaluates there; the straight one does not)
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
    from tinygrpo.run.config import parse_config

    with pytest.raises(ConfigError, match=None) as e:
        parse_config([flag, value])
    assert message in str(e.value)


@pytest.mark.slow
def test_exploration_study_runs_its_arms_and_writes_a_table_of_their_numbers(seed_reference, tmp_path):
    from studies import exploration, results

    out, docs = tmp_path / "study", tmp_path / "docs"
    argv = ["--arms", "default", "uniform", "--seeds", "1", "--max_steps", "4", "--eval_steps", "2"]
    argv += ["--model_name_or_path", seed_reference, "--output_dir", str(out), "--docs", str(docs)]
    assert exploration.main(argv) == 0
    data = json.loads((out / "exploration.json").read_text())
    got = data["results"]
    arms = {r["arm"]: r for r in got["arms"]}
    assert set(arms) == {"default", "uniform"} and set(data["runs"]) == set(arms)
    for arm, row in arms.items():
        metrics = read_jsonl(out / f"{arm}-seed1" / "metrics.jsonl")
        last_eval = [r for r in metrics if "eval/accuracy" in r][-1]
        assert row["validation_final"] == {"1": last_eval["eval/accuracy"]} and last_eval["step"] == 4
        assert 0 <= row["test_final"]["1"] <= 1
    m = got["measurement"]
    assert m["command"].startswith("python -m studies.exploration --jobs 1 --arms default uniform --seeds 1 ")
    assert m["machine"]["cpu"] and got["max_steps"] == 4 and got["eval_steps"] == 2
    # the results beside the docs, and the page one marked block drawn from them alone
    data_path = docs / "results" / "exploration.json"
    assert json.loads(data_path.read_text()) == got
    text = (docs / "exploration.md").read_text()
    marker = f"<!-- results studies.exploration:page {results.shown(data_path)} -->\n"
    assert text.startswith(marker + "# Exploration study\n") and text.endswith("<!-- /results -->\n")
    assert f"| default | {arms['default']['validation_final']['1']:.1%} |" in text
    assert results.rendered(text) == text
    assert (docs / "exploration.png").stat().st_size > 0
    # the docs are written again from the JSON alone, the same
    (docs / "exploration.md").unlink()
    data_path.unlink()
    assert exploration.main([*argv, "--rewrite_docs"]) == 0
    assert (docs / "exploration.md").read_text() == text and json.loads(data_path.read_text()) == got


def _eval_row(step: int, seconds: float, completions: int, accuracy: float, kinds: dict) -> dict:
    row = {"step": step, "time/elapsed": seconds, "num_completions": completions, "eval/accuracy": accuracy}
    return row | {f"eval/accuracy/{k}": v for k, v in kinds.items()}


def _write_run(d: Path, evals: list, signal: list, zero_std: list, before: dict, after: dict) -> Path:
    """A run directory as train_grpo.py leaves it, for the study's `curves`: evaluations ([step, seconds,
    completions, accuracy]; the problem kinds `before` at the first, `after` at the last, 0 in between) and one
    logged step every 5 with its signal fractions."""
    rows = [_eval_row(*evals[0], before)]
    rows += [_eval_row(*e, dict.fromkeys(after, 0.0)) for e in evals[1:-1]]
    rows.append(_eval_row(*evals[-1], after))
    rows += [
        {
            "step": 5 * (i + 1),
            "frac_completions_with_signal": s,
            "frac_reward_zero_std": z,
            "prompts/unsolved": 3,
        }
        for i, (s, z) in enumerate(zip(signal, zero_std, strict=True))
    ]
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["step"]))
    )
    return d


def _cells(text: str, first: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {first} |"))
    return [c.strip() for c in line.split("|")[1:-1]]


def test_exploration_results_and_page_from_finished_runs(tmp_path):
    """studies.exploration: the results (docs/results/exploration.json) from run directories, and the page drawn
    from them alone. The seeds differ so that a mean and a median, the last evaluation and the best, the whole run
    and its last 50 steps, the first run's reference and another's, give different text."""
    from studies import exploration as study

    kinds = {"carry": 0.6, "one_digit_operand": 0.2}
    runs: dict[str, list[dict]] = {"default": [], "uniform": []}
    # [step, seconds, completions, accuracy]: seed 42 peaks at 98.5 % and ends at 97 %; seed 2 never gets to 98 %
    evals = [
        [[0, 0.0, 0, 0.9], [25, 10.0, 100_000, 0.96], [50, 20.0, 200_000, 0.985], [75, 30.0, 300_000, 0.97]],
        [[0, 0.0, 0, 0.9], [25, 12.0, 150_000, 0.95], [50, 40.0, 400_000, 0.992], [75, 60.0, 600_000, 0.99]],
        [
            [0, 0.0, 0, 0.9],
            [25, 30.0, 900_000, 0.951],
            [50, 50.0, 1_000_000, 0.96],
            [75, 70.0, 1_100_000, 0.975],
        ],
    ]
    signal = [[0.5] * 2 + [0.1] * 10, [0.4] * 12, [0.9] * 2 + [0.0] * 10]
    zero_std = [[0.8] * 12, [0.5] * 12, [0.0] * 2 + [0.95] * 10]
    after = [{"carry": 0.9, "one_digit_operand": 0.7}, {"carry": 0.99, "one_digit_operand": 0.8}]
    after.append({"carry": 0.95, "one_digit_operand": 0.3})
    tests = [0.98, 0.99, 0.97]
    for i, seed in enumerate((42, 1, 2)):
        before = kinds if i == 0 else {"carry": 0.5, "one_digit_operand": 0.1}
        d = _write_run(tmp_path / f"default-seed{seed}", evals[i], signal[i], zero_std[i], before, after[i])
        runs["default"].append(study.curves(d) | {"test": tests[i]})
        flat = [[e[0], e[1], e[2], 0.9] for e in evals[i]]  # uniform: never 95 %
        d = _write_run(tmp_path / f"uniform-seed{seed}", flat, signal[i], zero_std[i], before, after[i])
        runs["uniform"].append(study.curves(d) | {"test": 0.9})
    got = study.summarize(
        runs, study.EXPLORATION, [42, 1, 2], "python -m studies.exploration --jobs 2 --docs docs"
    )
    got = json.loads(json.dumps(got))  # as read back from docs/results/exploration.json
    default = got["arms"][0]
    assert default["validation_final"] == {"42": 0.97, "1": 0.99, "2": 0.975}
    assert default["to"]["95"] == {"runs": 3, "seconds": 12.0, "completions": 150_000}
    assert got["measurement"]["machine"]["cpu"] and got["measurement"]["jobs"] == 1
    page = study.page(got)
    assert page.startswith(
        "# Exploration study\n\nGenerated by `python -m studies.exploration --jobs 2 --docs docs`"
    )
    assert "Each seed" not in page and page.endswith("![exploration](exploration.png)")
    cells = _cells(page, "default")
    assert cells[1] == "97.0% / 99.0% / 97.5%" and cells[2] == "98.0% / 99.0% / 97.0%"
    # 95 %: median of 10, 12, 30 s (the mean is 17); 98 %: two seeds of three; 99 %: one
    assert cells[3] == "12 (3) / 30 (2) / 40 (1)" and cells[4] == "0.15 M (3)"
    # signal over the whole run 16.7 / 40 / 15 % (median 16.7, mean 23.9), the last 50 steps 10 / 40 / 0 %;
    # zero-std groups over the whole run 80 / 50 / 79.2 % (median 79.2, mean 69.7), the last 50 steps 80 / 50 / 95 %
    assert cells[5] == "16.7% / 10.0%" and cells[6] == "79.2% / 80.0%"
    assert _cells(page, "uniform")[3:5] == ["- (0) / - (0) / - (0)", "-"]
    # by kind: the reference is the first run's first evaluation; each arm the median of its runs' last
    kinds_table = page.split("(median over seeds):\n\n")[1]
    assert _cells(kinds_table, "arm") == ["arm", "carry", "one_digit_operand"]
    assert _cells(kinds_table, "reference") == ["reference", "60.0%", "20.0%"]
    assert _cells(kinds_table, "default") == ["default", "95.0%", "70.0%"]
    assert study.headline(got).splitlines()[2] == "| " + " | ".join(cells) + " |"


def test_sample_efficiency_results_give_each_seed_to_99_and_the_readme_summary():
    """studies.sample_efficiency (docs/results/sample_efficiency.json): each seed's seconds and completions to 99 %,
    the median over seeds with a seed that never gets there counted as infinitely late (the per-seed table) against
    the median of the runs that got there (the main table); and the README's summary (`headline`)."""
    from studies import exploration, sample_efficiency

    def run(evals: list, final: float) -> dict:
        ev = [[0, 0.0, 0, 0.9], *evals, [1000, 120.0, 3_000_000, final]]
        kinds = {"eval/accuracy/carry": 0.9}
        return {"eval": ev, "signal": [[5, 0.1, 0.9]], "kinds": kinds, "kinds_before": kinds, "test": final}

    never = [run([], f) for f in (0.976, 0.98, 0.988)]
    runs = {arm: never for arm in [*sample_efficiency.HEADLINE, *sample_efficiency.NEVER]}
    runs["default"] = [
        run([[200, 49.3, 1_000_000, 0.99]], 1.0),
        run([[200, 40.0, 800_000, 0.985]], 0.984),  # never 99 %
        run([[300, 82.9, 3_000_000, 0.995]], 0.986),
    ]
    runs["one refill"] = [never[0], run([[100, 38.1, 1_015_464, 0.99]], 0.986), never[2]]
    got = exploration.summarize(
        runs, sample_efficiency.STUDY, [42, 1, 2], "python -m studies.sample_efficiency"
    )
    got = json.loads(json.dumps(got))
    assert got["arms"][0]["per_seed_to"] == {
        "seconds": {"42": 49.3, "1": None, "2": 82.9},
        "completions": {"42": 1_000_000, "1": None, "2": 3_000_000},
    }
    page = exploration.page(got)
    assert "completions to 99 % |" in page and "Each seed, on validation (evaluated every 10 steps):" in page
    main, per_seed = (t.split("\n\n")[0] for t in page.split("| arm | ")[1:3])
    # the main table, to 99 %: the median of the two seeds that got there (66.1 s, 2.0 M)
    assert _cells("| arm | " + main, "default")[3:5] == ["49 (3) / 49 (3) / 66 (2)", "2.00 M (2)"]
    # each seed, and the median with seed 1 infinitely late
    assert _cells("| arm | " + per_seed, "default")[1:] == [
        "49.3 / - / 82.9",
        "82.9",
        "1,000,000 / - / 3,000,000",
        "3,000,000",
    ]
    assert _cells("| arm | " + per_seed, "one refill")[1:] == [
        "- / 38.1 / -",
        "not reached",
        "- / 1,015,464 / -",
        "not reached",
    ]
    readme = sample_efficiency.headline(got).splitlines()
    assert readme[2] == "| default | 100.0 / 98.4 / 98.6 % | 49.3 / - / 82.9 (82.9) |"
    assert readme[6] == "| one refill instead of three | 97.6 / 98.6 / 98.8 % | - / 38.1 / - (not reached) |"
    assert (
        readme[7]
        == "| 32 prompts x 8, 32 x 16 (G 16), a 600-step schedule, floor 0.2 | 97.6-98.8 % | not reached |"
    )


def test_sample_efficiency_study_arms_each_change_one_setting_of_the_default_or_combine_two_arms():
    from studies.sample_efficiency import ARMS
    from tinygrpo.run.config import parse_config

    default = parse_config([])

    def generations(cfg) -> int:
        return cfg.max_steps // cfg.updates_per_generation

    def changed(flags: list[str]) -> dict:
        cfg = parse_config(flags)
        out = {k: v for k, v in vars(cfg).items() if v != getattr(default, k)}
        if generations(cfg) == generations(default):  # (the same length in generations, however it is spelt)
            out.pop("max_steps", None), out.pop("max_generations", None)
        return out

    for arm, (flags, what) in ARMS.items():
        # a combination: exactly the changes of two other single-change arms, which do not overlap
        if " + " in arm:
            parts = arm.split(" + ")
            assert len(parts) == 2 and all(p in ARMS for p in parts), arm
            a, b = (changed(ARMS[p][0]) for p in parts)
            assert len(a) == len(b) == 1 and a.keys().isdisjoint(b), arm
            assert changed(flags) == a | b, arm
        else:  # (a sample allocation and its unit are one setting: the rule and how finely it splits)
            one = set(changed(flags)) - (
                {"allocation_unit"} if "sample_allocation" in changed(flags) else set()
            )
            assert len(one) == (0 if arm == "default" else 1), (arm, changed(flags))
        assert what
