"""tinygrpo/algorithm/forecast.py: the signal forecast before the first step. Its arithmetic against an enumeration and plain
loops, its estimate against the exact probabilities of a real policy, and in a run: printed, logged, warned about,
and without any effect on what the run trains."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch
from _runs import reference_trainer, run_inproc
from datasets import Dataset

from tinygrpo.algorithm.forecast import forecast_signal, signal_probability
from tinygrpo.data.problems import load_split
from tinygrpo.rollout.evaluation import answer_beliefs
from tinygrpo.rollout.prompts import left_pad


@pytest.mark.parametrize("G", [2, 3, 5, 8])
def test_signal_probability_is_the_chance_of_a_mixed_group(G):
    """Against the sum over every one of the 2^G outcomes of a group whose outcomes are not all equal."""
    for p in (0.0, 0.02, 0.3, 0.5, 0.97, 1.0):
        mixed = sum(
            math.prod(p if o else 1 - p for o in outcome)
            for outcome in itertools.product((0, 1), repeat=G)
            if 0 < sum(outcome) < G
        )
        got = float(signal_probability(torch.tensor(p, dtype=torch.float64), G))
        assert got == pytest.approx(mixed, abs=1e-12)


def test_forecast_counts_groups_and_prompts_as_plain_loops_do():
    g = torch.Generator().manual_seed(0)
    G, P = 4, 50
    right = torch.rand(P * G, generator=g) < torch.rand(P, generator=g).repeat_interleave(G)
    rewards = right.double()
    rewards[torch.randperm(P * G, generator=g)[:30]] = float("nan")  # some rewards do not apply
    f = forecast_signal(rewards, right, G)
    groups = [rewards[i * G : (i + 1) * G].tolist() for i in range(P)]
    valid = [[r for r in grp if not math.isnan(r)] for grp in groups]
    assert f.signal == pytest.approx(sum(len(set(v)) > 1 for v in valid) / P)
    hits = [right[i * G : (i + 1) * G].tolist() for i in range(P)]
    assert f.pass_at_g == pytest.approx(sum(any(h) for h in hits) / P)
    assert f.pass_rate == pytest.approx(sum(map(sum, hits)) / (P * G))
    assert (f.prompts, f.num_generations) == (P, G)
    # partial credit: rewards that differ carry signal though no completion is right
    f = forecast_signal(torch.tensor([0.1, 0.0, 0.1, 0.1]), torch.zeros(4, dtype=torch.bool), 2)
    assert (f.signal, f.pass_at_g) == (0.5, 0.0)


def test_the_warning_says_below_what_and_what_helps():
    f = forecast_signal(torch.zeros(16), torch.zeros(16, dtype=torch.bool), 8)
    line = f.warning(0.2)
    assert (
        line.startswith("warning: only 0.0% of groups") and "all wrong" in line and "num_generations" in line
    )
    assert f.warning(0.0) is None
    solved = forecast_signal(torch.ones(16), torch.ones(16, dtype=torch.bool), 8)
    assert "all right" in solved.warning(0.2)


def test_the_forecast_estimates_the_exact_share_of_a_real_policy(seed_reference, tmp_path):
    """The seed reference's exact pass rate on each prompt is its probability of the gold answer then <eos> (the
    strict verifier accepts that one string); the expected share of groups with signal is then the mean of
    1 - p^G - (1-p)^G. The forecast samples: over 1,800 draws of the 36 prompts it lands within 5 standard errors."""
    G = 4
    rows = load_split("seed_bank", "train").to_dict()
    many = Dataset.from_dict(
        {c: v * 50 for c, v in rows.items()}
    )  # each prompt 50 times: the draws repeat them
    t = reference_trainer(seed_reference, tmp_path, num_generations=G, temperature=1.0)
    t.train_dataset = many
    t.generator.prompts = type(t.prompts)(many, t.tokenizer, 3)
    f = t.generator.forecast(len(many), t.evaluator.verifier)
    ids, mask = left_pad(t.tokenizer(rows["prompt"])["input_ids"], t.tokenizer.pad_token_id)
    answers = sorted(set(rows["answer"]))
    beliefs = answer_beliefs(t.model, t.tokenizer, ids, mask, answers)  # (36, C)
    gold = torch.tensor([answers.index(a) for a in rows["answer"]])
    p = beliefs[torch.arange(len(gold)), gold].double()  # (36,) each prompt's pass rate
    expected = float(signal_probability(p, G).mean())
    se = math.sqrt(expected * (1 - expected) / f.prompts)
    assert 0.05 < expected < 0.95  # (a share the test can tell apart from 0 and 1)
    assert abs(f.signal - expected) < 5 * se + 1e-9, (f.signal, expected, se)
    assert abs(f.pass_rate - float(p.mean())) < 5 * math.sqrt(0.25 / (f.prompts * G))


@pytest.mark.slow
def test_a_run_prints_logs_and_warns_and_trains_what_it_would_without(seed_reference, tmp_path, capfd):
    """Bit for bit the same weights and metrics (the forecast's own rows aside) with the forecast on and off; on, its
    line is printed, its metrics sit in step 0's row and summary.json, and below the minimum the warning reaches
    stderr, warnings.jsonl and the report."""
    outs = {}
    for n in (0, 32):
        out = tmp_path / str(n)
        extra = [
            "--max_steps",
            "3",
            "--seed",
            "5",
            "--signal_forecast_prompts",
            str(n),
            "--signal_forecast_min",
            "1",
        ]
        assert run_inproc(seed_reference, out, *extra) == 0
        outs[n] = out
    err = capfd.readouterr()
    assert "signal forecast: " in err.out and "of groups of G=4 will carry signal" in err.out
    assert err.err.count("warning: only ") == 1  # the run with the forecast, below a minimum of 1
    rows = {
        n: [json.loads(x) for x in (o / "metrics.jsonl").read_text().splitlines()] for n, o in outs.items()
    }
    first = rows[32][0]
    assert first["step"] == 0 and 0 <= first["forecast/frac_groups_with_signal"] <= 1
    assert first["forecast/prompts"] == 32 and "forecast/pass@4" in first
    assert json.loads((outs[32] / "summary.json").read_text())["forecast"]["forecast/prompts"] == 32
    assert json.loads((outs[0] / "summary.json").read_text())["forecast"] == {}

    def same(r: dict) -> dict:
        return {
            k: v for k, v in r.items() if not k.startswith(("forecast/", "time/", "throughput/"))
        }  # (seconds vary)

    assert [same(r) for r in rows[32]] == [same(r) for r in rows[0]]
    weights = [(o / "final" / "model.safetensors").read_bytes() for o in outs.values()]
    assert weights[0] == weights[1]
    warnings = [json.loads(x) for x in (outs[32] / "warnings.jsonl").read_text().splitlines()]
    assert warnings[0]["step"] == 0 and warnings[0]["warning"].startswith("warning: only ")
    report = (outs[32] / "report.html").read_text()
    assert "warning: only " in report and "signal forecast (before step 1)" in report
    assert "measured in the steps logged up to step 20" in report
    assert "signal forecast" not in (outs[0] / "report.html").read_text()


def _fake_run(d, forecast: float, shares: list[float]) -> None:
    d.mkdir(parents=True)
    rows = [{"step": 0, "forecast/frac_groups_with_signal": forecast, "forecast/pass@8": 0.5}]
    rows[0] |= {"forecast/pass_rate": 0.25, "time/forecast": 1.0, "eval/accuracy": 0.3}
    rows += [{"step": i + 1, "frac_reward_zero_std": 1 - x} for i, x in enumerate(shares)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text("{}")


def test_forecast_study_table_compares_each_seed_and_flags_a_gap_over_10_points(tmp_path):
    """studies.forecast: the forecast beside the mean share over steps 1-20 and at step 1 (from the runs' own rows),
    medians over seeds, and the largest gap of any seed, flagged past 10 points."""
    from studies import forecast as study

    steps = study.STEPS
    _fake_run(tmp_path / "reverse" / "seed42", 0.50, [0.40] * steps)
    _fake_run(tmp_path / "reverse" / "seed1", 0.60, [0.70] + [0.55] * (steps - 1))
    _fake_run(tmp_path / "reverse" / "seed2", 0.70, [0.30] * steps)  # 40 points off
    _fake_run(tmp_path / "countdown" / "seed42", 0.30, [0.30] * (steps - 1))  # a step missing: refused
    with pytest.raises(ValueError, match="19 of the first 20 steps"):
        study.summarize(["countdown"], [42], tmp_path, "cmd")
    results = json.loads(json.dumps(study.summarize(["reverse", "addition"], [42, 1, 2], tmp_path, "cmd")))
    assert [t["task"] for t in results["tasks"]] == ["reverse"]  # (no runs of addition: no row)
    runs = results["tasks"][0]["runs"]
    assert runs["1"]["measured"] == pytest.approx((0.70 + 0.55 * (steps - 1)) / steps)
    assert runs["1"]["step_1"] == pytest.approx(0.70)
    (line,) = [x for x in study.table(results).splitlines() if x.startswith("| `reverse`")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[1] == "60.0% (50.0% / 60.0% / 70.0%)" and cells[2] == "50.0% (G = 8)"
    assert cells[3].startswith("40.0% (40.0% / ") and cells[4] == "40.0 points (over 10)"
    assert cells[5] == "40.0%"
