"""The reasoning experiment's pieces: the mixed reference's targets (SFTConfig.mix_column / mix_share), the format
detector of multiplication, the share and accuracy of each format (held-out and sampled), and the study's results
and the tables drawn from them."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from datasets import Dataset

from tiny_lm import TinyLMConfig, TinyLMForCausalLM, build_tokenizer
from tiny_lm.tokenization_tiny_lm import EOS_TOKEN as EOS
from tinygrpo.base.options import ConfigError
from tinygrpo.data.task import get_task
from tinygrpo.data.tasks import multiplication
from tinygrpo.data.verifier import Verifier, format_counts, format_metrics
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.evaluation import held_out_metrics
from tinygrpo.rollout.prompts import left_pad
from tinygrpo.sft.train import SFTConfig, training_targets


def _train(n: int = 200) -> Dataset:
    rows = [(a, 10 + a % 90) for a in range(10, 10 + n)]
    return Dataset.from_dict(
        {
            "prompt": [f"{a}*{b}=" for a, b in rows],
            "answer": [str(a * b) for a, b in rows],
            "worked": [multiplication.worked(a, b) for a, b in rows],
        }
    )


def test_a_fixed_seeded_share_of_the_problems_imitate_the_mix_column():
    train = _train()
    cfg = SFTConfig(dataset_name="multiplication", mix_column="worked", mix_share=0.1, seed=3)
    targets = training_targets(cfg, train)
    worked = [t == w for t, w in zip(targets, train["worked"], strict=True)]
    assert sum(worked) == 20  # exactly the share, of 200
    assert all(t == a for t, a, w in zip(targets, train["answer"], worked, strict=True) if not w)
    assert training_targets(cfg, train) == targets  # the same problems on every call at one seed
    other = training_targets(
        SFTConfig(dataset_name="multiplication", mix_column="worked", mix_share=0.1, seed=4), train
    )
    assert other != targets and sum(t != a for t, a in zip(other, train["answer"], strict=True)) == 20
    plain = SFTConfig(dataset_name="multiplication", mix_column="worked", mix_share=0.0)
    assert training_targets(plain, train) == train["answer"]  # share 0: the column alone, mix_column unread
    everything = SFTConfig(dataset_name="multiplication", mix_column="worked", mix_share=1.0)
    assert training_targets(everything, train) == train["worked"]


def test_mix_errors_name_the_field():
    with pytest.raises(ConfigError, match="mix_share=0.5 needs mix_column"):
        SFTConfig(mix_share=0.5)
    with pytest.raises(ConfigError, match="mix_share"):
        SFTConfig(mix_column="worked", mix_share=1.5)
    for share in (0.1, 0.0):  # (a column named is a column checked, used or not)
        cfg = SFTConfig(dataset_name="multiplication", mix_column="nope", mix_share=share)
        with pytest.raises(ValueError, match="mix_column 'nope': multiplication/train has no such column"):
            training_targets(cfg, _train())


@pytest.mark.parametrize(
    "completion, want",
    [
        ("1776" + EOS, "direct"),
        ("1776", "direct"),  # truncated: still the answer alone
        ("37*8=296,37*40=1480,296+1480=1776" + EOS, "scratchpad"),
        ("37*8=2", "scratchpad"),  # work begun, cut off
        ("37*8", "other"),
        ("12,3" + EOS, "other"),
        (EOS, "other"),
        ("", "other"),
    ],
)
def test_multiplication_formats(completion, want):
    assert multiplication.completion_format(completion) == want
    assert want in multiplication.FORMATS.names


def test_format_metrics_count_each_format_and_its_hits():
    comps = ["12" + EOS, "1*2=2" + EOS, "3" + EOS, "9*" + EOS, "4*5=20" + EOS, "7" + EOS]
    right = [True, True, False, False, False, True]
    m = format_metrics("eval/", multiplication.FORMATS, format_counts(multiplication.FORMATS, comps, right))
    # by hand: direct 12, 3, 7 (2 right); scratchpad 1*2=2, 4*5=20 (1 right); other 9* (0 right)
    formats = [multiplication.completion_format(c) for c in comps]
    counts = Counter(formats)
    for name in multiplication.FORMATS.names:
        assert m[f"eval/format/{name}"] == pytest.approx(counts[name] / len(comps))
    assert m["eval/format_accuracy/direct"] == pytest.approx(2 / 3)
    assert m["eval/format_accuracy/scratchpad"] == pytest.approx(1 / 2)
    assert m["eval/format_accuracy/other"] == 0.0
    empty = format_metrics("x/", multiplication.FORMATS, format_counts(multiplication.FORMATS, [], []))
    assert set(empty) == {
        f"x/format/{n}" for n in multiplication.FORMATS.names
    }  # no format taken: no accuracy


def test_a_format_the_detector_names_but_the_task_does_not_list_is_an_error():
    from tinygrpo.data.task import Formats

    formats = Formats(("direct",), multiplication.completion_format)
    with pytest.raises(
        ValueError, match="the format detector named 'scratchpad' for the completion '1\\*2=2"
    ):
        format_counts(formats, ["12", "1*2=2"], [True, False])


def test_held_out_metrics_report_formats_and_length_of_the_greedy_completions():
    task = get_task("multiplication_mixed")
    tok = build_tokenizer(task.chars)
    torch.manual_seed(0)
    cfg = TinyLMConfig(
        vocab_size=len(tok),
        n_positions=24,
        n_embd=16,
        n_layer=1,
        n_head=2,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = TinyLMForCausalLM(cfg).eval()
    rows = {"prompt": ["12*34=", "56*78=", "90*12="], "answer": ["408", "4368", "1080"], "a": [12, 56, 90]}
    ids, mask = left_pad(tok(rows["prompt"])["input_ids"], tok.pad_token_id)
    held = held_out_metrics(
        model, tok, ids, mask, rows, SamplingParams.greedy(12), verifier=Verifier.of(task.dataset)
    )
    # the length of a character-level completion: its characters, <eos> one token
    lengths = [len(c.removesuffix(EOS)) + c.endswith(EOS) for c in held.completions]
    assert held.metrics["eval/mean_length"] == pytest.approx(sum(lengths) / 3)
    formats = Counter(multiplication.completion_format(c) for c in held.completions)
    for name in multiplication.FORMATS.names:
        assert held.metrics[f"eval/format/{name}"] == pytest.approx(formats[name] / 3)


def _grpo_run(d, evals, sampled_rows=()):
    """A finished GRPO run: summary.json, and metrics.jsonl with its evaluations (step, elapsed seconds, accuracy,
    worked share, mean length, accuracy within the worked format) and sampled rows."""
    d.mkdir(parents=True)
    (d / "summary.json").write_text("{}")
    rows = []
    for step, secs, acc, share, length, within in evals:
        row = {
            "step": step,
            "eval/accuracy": acc,
            "eval/format/scratchpad": share,
            "eval/mean_length": length,
        }
        row |= {} if secs is None else {"time/elapsed": secs}
        row |= {} if within is None else {"eval/format_accuracy/scratchpad": within}
        rows.append(row)
    rows += list(sampled_rows)
    rows.sort(key=lambda r: r["step"])
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _more_sft(tmp_path, monkeypatch, runs):
    """The mixed reference's sft_summary.json (4000 steps in 800 s: 0.2 s a step) and the control's runs."""
    from studies import reasoning as study

    monkeypatch.setattr(study, "REPO", tmp_path)
    ref = tmp_path / "checkpoints" / study.MIXED
    ref.mkdir(parents=True)
    (ref / "sft_summary.json").write_text(json.dumps({"steps": 4000, "train_seconds": 800.0}))
    for seed, steps, acc, share in runs:
        d = study.run_dir(tmp_path, "more_sft", seed)
        d.mkdir(parents=True)
        summary = {"steps": steps, "train_seconds": 5000.0 + seed, "eval_accuracy": acc}
        summary["eval_formats"] = {"scratchpad": share, "direct": 1 - share, "other": 0.0}
        (d / "sft_summary.json").write_text(json.dumps(summary))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")[1:-1]]


def test_reasoning_study_summarizes_finished_runs_and_draws_its_table(tmp_path, monkeypatch):
    """studies.reasoning: summarize (runs -> docs/results/reasoning.json) then table (results -> markdown). A row per
    GRPO arm from the FIRST and the LAST evaluation of each run (a middle one differs from both), the MEDIAN over
    seeds in every column (the seeds are skewed so that a mean gives other text in each), and the more-SFT
    control's row from its sft_summary.json."""
    from studies import reasoning as study

    mixed = {  # seed: (start acc, share, length; after acc, share, length, within; seconds)
        42: (0.20, 0.10, 10.0, 0.40, 0.80, 30.0, 0.40, 600.0),
        1: (0.21, 0.12, 11.0, 0.45, 0.88, 33.0, 0.50, 660.0),
        2: (0.30, 0.26, 17.0, 0.62, 0.99, 39.0, 0.90, 900.0),
    }
    for seed, (a0, s0, l0, a1, s1, l1, w1, secs) in mixed.items():
        middle = (150, secs / 2, 0.05, 0.5, 20.0, 0.01)
        evals = [(0, None, a0, s0, l0, None), middle, (300, secs, a1, s1, l1, w1)]
        _grpo_run(study.run_dir(tmp_path, "mixed", seed), evals)
    _grpo_run(
        study.run_dir(tmp_path, "direct", 42),
        [(0, None, 0.03, 0.0, 5.0, None), (300, 90.0, 0.04, 0.0, 5.0, None)],
    )
    _more_sft(tmp_path, monkeypatch, [(42, 7000, 0.30, 0.10), (1, 7300, 0.20, 0.12), (2, 9000, 0.22, 0.30)])
    results = study.summarize(tmp_path, [42, 1, 2], "python -m studies.reasoning")
    assert results["measurement"]["command"] == "python -m studies.reasoning" and results["losses"] is None
    assert results["tokens"] is None  # (no completions logged)
    lines = study.table(json.loads(json.dumps(results))).splitlines()  # (as read back from the results file)
    assert len(lines) == 5  # head, rule, mixed, direct, more_sft
    row = _cells(lines[2])
    assert row[0] == "`mixed` (GRPO)" and row[1] == "21.0%"  # (mean 23.7%)
    assert row[2] == "**45.0%** (40.0% / 45.0% / 62.0%; seeds 42, 1, 2)"  # (mean 49.0%)
    assert row[3] == "12.0% -> **88.0%**"  # (means 16.0% and 89.0%)
    assert (
        row[4] == "50.0%" and row[5] == "11.0 -> 33.0" and row[6] == "11.0"
    )  # (means 60.0%, 12.7 -> 34.0, 12.0)
    direct = [
        "`direct` (GRPO)",
        "3.0%",
        "**4.0%** (4.0%; seeds 42)",
        "0.0% -> **0.0%**",
        "n/a",
        "5.0 -> 5.0",
        "1.5",
    ]
    assert _cells(lines[3]) == direct
    # the control: 7000 steps (its first seed's) against the reference's 4000; the median accuracy, worked share and
    # extra minutes (3000, 3300 and 5000 extra steps at 0.2 s: 10.0, 11.0 and 16.7 minutes)
    sft = _cells(lines[4])
    assert sft[0] == "`more_sft` (no RL: 7000 SFT steps, not 4000)" and sft[1] == "(the same recipe)"
    assert sft[2] == "**22.0%** (30.0% / 20.0% / 22.0%; seeds 42, 1, 2)"  # (mean 24.0%)
    assert (
        sft[3] == "-> 12.0%" and sft[6] == "11.0 more of SFT (at the reference's rate)"
    )  # (means 17.3%, 12.6)


def test_reasoning_loss_table_averages_the_last_windows_of_the_median_seed(tmp_path):
    """The loss table from the loss arms' runs: accuracy after (median; each), the median worked share after, and
    the sampled lengths over the LAST WINDOWS windows of BIN steps (each seed's window means, the median over seeds,
    the mean over the windows; the first window, far longer, is left out); nothing with one normaliser alone."""
    from studies import reasoning as study

    def sampled_rows(right, wrong_offset):
        rows = []
        for step in range(1, 61):  # windows 0..5; the table's: 1..5 (steps 11-60)
            window = (step - 1) // study.BIN
            r = 100.0 if window == 0 else right
            w = 100.0 if window == 0 else 19.0 + window + wrong_offset
            rows.append({"step": step, "reward": 0.1, "completions/mean_length_right": r})
            rows[-1]["completions/mean_length_wrong"] = w
        return rows

    seeds = {42: (0.20, 0.80, 30.0, 0.0), 1: (0.25, 0.84, 31.0, 0.0), 2: (0.50, 0.99, 38.0, 9.0)}
    for seed, (acc, share, right, offset) in seeds.items():
        evals = [(0, None, 0.1, 0.1, 10.0, None), (60, 60.0, acc, share, 30.0, 0.5)]
        _grpo_run(study.run_dir(tmp_path, "mixed", seed), evals, sampled_rows(right, offset))
    assert study.summarize(tmp_path, [42, 1, 2], "x")["losses"] is None  # one normaliser: no comparison
    for seed, (acc, share, right, offset) in seeds.items():
        evals = [(0, None, 0.1, 0.1, 10.0, None), (60, 60.0, acc - 0.1, share - 0.1, 30.0, 0.5)]
        _grpo_run(study.run_dir(tmp_path, "mixed_dr_grpo", seed), evals, sampled_rows(right - 1, offset))
    results = json.loads(json.dumps(study.summarize(tmp_path, [42, 1, 2], "x")))
    assert results["losses"]["steps"] == [11, 60]
    lines = study.losses_table(results).splitlines()
    assert lines[0].endswith("| sampled length in steps 11-60, right / wrong |") and len(lines) == 4
    # median 25.0 (mean 31.7); share 84.0 (mean 87.7); right: 31 in each window (the first windows: 44.8; the
    # mean seed: 33); wrong: 20..24 in windows 1..5, mean 22.0 (the mean seed's: 25.0)
    assert _cells(lines[2]) == ["`dapo`", "25.0 % (20.0 / 25.0 / 50.0)", "84.0 %", "31.0 / 22.0"]
    assert _cells(lines[3]) == ["`dr_grpo`", "15.0 % (10.0 / 15.0 / 40.0)", "74.0 %", "30.0 / 22.0"]


def test_reasoning_screen_tables_draw_their_hand_typed_results():
    """The validation screens of docs/reasoning.md (docs/results/reasoning_shares.json, reasoning_recipe.json):
    a run stopped early shows its last evaluation in the next column, a longer run its LAST one in the last column;
    a reference shared with the row above is 'the same', the chosen recipe is in bold, an empty cell is '| |'."""
    from studies import reasoning as study

    def pair(a, w):
        return {"accuracy": a, "worked": w}

    ref = {"accuracy": 0.05, "worked": 0.06, "accuracy_worked": 0.03, "accuracy_direct": 0.047}
    shares = {
        "steps": [25, 50],
        "rows": [
            {"mix_share": 0.1, "reference": ref, "evals": {"25": pair(0.07, 0.01), "50": pair(0.08, 0.02)}},
            {
                "mix_share": 0.25,
                "reference": ref,
                "stopped_at": 30,
                "evals": {"25": pair(0.1, 0.5), "30": pair(0.2, 0.6)},
            },
            {
                "mix_share": 0.5,
                "reference": ref,
                "evals": {
                    "25": pair(0.3, 0.9),
                    "50": pair(0.3, 0.9),
                    "100": pair(0.31, 0.91),
                    "300": pair(0.4, 0.95),
                },
            },
        ],
    }
    lines = study.shares_table(shares).splitlines()
    assert lines[0].endswith("| GRPO step 25 | step 50 |")
    assert lines[2] == "| 10 % | 5.0 %, 6.0 %, 3.0 % / 4.7 % | 7.0 %, 1.0 % | 8.0 %, 2.0 % |"
    assert _cells(lines[3])[2:] == ["10.0 %, 50.0 %", "(stopped at 30: 20.0 %, 60.0 %)"]
    assert _cells(lines[4])[3] == "30.0 %, 90.0 % (300 steps: 40.0 %, 95.0 %)"
    recipe = {
        "steps": [50, 150],
        "rows": [
            {
                "sft_steps": 2000,
                "reference": pair(0.08, 0.17),
                "lr": 5e-4,
                "grpo_steps": 50,
                "evals": {"50": pair(0.2, 0.8)},
            },
            {
                "sft_steps": 2000,
                "reference": pair(0.08, 0.17),
                "lr": 1e-3,
                "grpo_steps": 150,
                "evals": {"50": pair(0.3, 0.8), "150": pair(0.4, 0.85)},
                "minutes": 12.84,
                "chosen": True,
            },
            {"sft_steps": 8000, "reference": pair(0.22, 0.12), "lr": None, "extra_sft_minutes": 14.8},
        ],
    }
    lines = study.recipe_table(recipe).splitlines()
    assert lines[2] == "| 2000 steps: 8.0 %, 17.0 % worked | lr 5e-4, 50 steps | 20.0 %, 80.0 % | | |"
    assert lines[3] == "| the same | **lr 1e-3, 150 steps** | 30.0 %, 80.0 % | **40.0 %, 85.0 %** | 12.8 |"
    assert lines[4] == "| 8000 steps, no GRPO | | | 22.0 %, 12.0 % worked | 14.8 more of SFT |"


def test_reasoning_length_figure_draws_each_loss_from_its_runs(tmp_path):
    """The Dr. GRPO figure: drawn from the sampled rows of the finished runs of each loss arm; nothing without runs of
    two of them."""
    from studies import reasoning as study

    assert not study.length_figure(tmp_path, [42], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()
    for arm in ("mixed", "mixed_dr_grpo"):
        d = study.run_dir(tmp_path, arm, 42)
        d.mkdir(parents=True)
        (d / "summary.json").write_text("{}")
        rows = [{"step": 0, "eval/accuracy": 0.1}]
        rows += [
            {
                "step": s,
                "reward": 0.1,
                "completions/mean_length_right": 30.0,
                "completions/mean_length_wrong": 20.0 + s,
            }
            for s in (1, 2, 3)
        ]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["wrong"] for r in study.sampled(study.run_dir(tmp_path, "mixed", 42))] == [21.0, 22.0, 23.0]
    # one normaliser alone is no comparison: nothing drawn (a study of other arms keeps the published figure)
    (study.run_dir(tmp_path, "mixed_dr_grpo", 42) / "summary.json").rename(tmp_path / "aside.json")
    assert not study.length_figure(tmp_path, [42], tmp_path / "one.png")
    assert not (tmp_path / "one.png").exists()
    (tmp_path / "aside.json").rename(study.run_dir(tmp_path, "mixed_dr_grpo", 42) / "summary.json")
    assert study.length_figure(tmp_path, [42], tmp_path / "length.png")
    assert (tmp_path / "length.png").read_bytes()[:4] == b"\x89PNG"


def test_each_grpo_arm_starts_from_its_reference_with_its_flags(tmp_path, monkeypatch):
    from studies import reasoning as study

    seen = {}
    monkeypatch.setattr(study, "run_logged", lambda cmd, d: seen.setdefault(d.parent.name, cmd) and 0)
    for arm in study.GRPO_ARMS:
        study.grpo(arm, 1, tmp_path, "validation", ["--max_steps", "2"])
    assert set(seen) == set(study.GRPO_ARMS)
    for arm, cmd in seen.items():
        flag = dict(zip(cmd, cmd[1:], strict=False))
        task = "multiplication" if arm == "direct" else "multiplication_mixed"
        assert flag["--model_name_or_path"] == f"checkpoints/{task}"
        assert flag["--loss_type" if "loss_type" in " ".join(cmd) else "--config"] == {
            "mixed_grpo": "grpo",
            "mixed_dr_grpo": "dr_grpo",
        }.get(arm, "configs/multiplication_mixed.yaml")
        assert (
            flag["--dataset_test_split"] == "validation"
            and flag["--logging_steps"] == "1"
            and cmd[-2:] == ["--max_steps", "2"]
        )


@pytest.mark.parametrize("experiment", ["multiplication", "addition_long"])
def test_each_experiment_runs_its_own_recipe_from_its_own_references(tmp_path, monkeypatch, experiment):
    """--experiment picks the problem set: its recipe, its mixed and direct references, and where its runs and
    results go (the addition experiment's never over the published multiplication ones)."""
    from studies import reasoning as study

    exp = study.EXPERIMENTS[experiment]
    seen = {}
    monkeypatch.setattr(study, "run_logged", lambda cmd, d: seen.setdefault(d.parent.name, cmd) and 0)
    for arm in ("mixed", "direct"):
        study.grpo(arm, 1, tmp_path, "validation", [], exp)
    for arm, task in (("mixed", f"{experiment}_mixed"), ("direct", experiment)):
        flag = dict(zip(seen[arm], seen[arm][1:], strict=False))
        assert flag["--config"] == f"configs/{experiment}_mixed.yaml"
        assert flag["--model_name_or_path"] == f"checkpoints/{task}"
    # the direct reference's context: the recipe's room for a worked sum would not fit addition_long's 24 positions
    assert (flag.get("--max_completion_length") == "8") == (experiment == "addition_long")
    names = {e.name for e in study.EXPERIMENTS.values()}
    assert len(names) == len(study.EXPERIMENTS) and study.EXPERIMENTS["multiplication"].name == "reasoning"


def test_binned_compares_runs_logged_at_different_steps_window_by_window():
    from studies.reasoning import BIN, binned

    every = [{"step": s, "wrong": float(s)} for s in range(1, 2 * BIN + 1)]  # means 5.5 and 15.5
    tenth = [{"step": s, "wrong": float(s)} for s in (BIN, 2 * BIN)] + [{"step": 3 * BIN, "wrong": None}]
    assert binned([every], "wrong") == {0: 5.5, 1: 15.5}
    assert binned([every, tenth, tenth], "wrong") == {
        0: 10.0,
        1: 20.0,
    }  # the median of 5.5, 10, 10 and of 15.5, 20, 20


def test_token_moves_averages_each_kind_of_token(tmp_path):
    from studies.reasoning import token_moves, tokens_table

    assert token_moves(tmp_path) is None  # no completions logged
    row = {
        "step": 1,
        "prompt": "12*34=",
        "completion": "12*4=48<eos>",
        "tokens": ["1", "2", "*", "4", "=", "<eos>"],
    }
    row |= {"token_ratio": [1.5, 0.9, 1.0, 1.1, 1.0, 1.0], "token_entropy": [0.6, 0.2, 0.0, 0.4, 0.0, 0.1]}
    (tmp_path / "completions.jsonl").write_text(
        json.dumps(row) + "\n" + json.dumps({"step": 1, "prompt": "x"}) + "\n"
    )
    moves = json.loads(json.dumps(token_moves(tmp_path)))
    assert moves["completions"] == 1 and moves["run"] == f"{tmp_path.parent.name}/{tmp_path.name}"
    lines = tokens_table({"tokens": moves}).splitlines()
    assert lines[2] == "| the first (the format's choice) | 1 | 0.5000 | 0.600 |"
    # 2 and 4: |0.9 - 1|, |1.1 - 1|
    assert lines[3] == "| the other digits (partial products, sum, answer) | 2 | 0.1000 | 0.300 |"
    assert lines[4] == "| the work's syntax (`*`, `=`, `,`, `+`, `<eos>`) | 3 | 0.0000 | 0.033 |"


def test_reasoning_study_on_validation_writes_beside_its_runs_never_over_the_published_docs(tmp_path):
    """A choice made on validation (`--dataset_test_split validation`) writes its results and figures into --out; only the
    test split's runs write docs/ and docs/results/ by default."""
    from studies import reasoning as study

    docs = study.REPO / "docs"
    published = [*docs.glob("reasoning*"), *(docs / "results").glob("reasoning*")]
    before = {p: p.read_bytes() for p in published}
    d = study.run_dir(tmp_path, "mixed", 42)
    d.mkdir(parents=True)
    (d / "summary.json").write_text("{}")
    rows = [{"step": 0, "eval/accuracy": 0.1, "eval/format/scratchpad": 0.1, "eval/mean_length": 6.0}]
    rows.append({"step": 5, "time/elapsed": 60.0, "eval/accuracy": 0.2, "eval/format/scratchpad": 0.5})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    study.main(["--summarize", "--dataset_test_split", "validation", "--seeds", "42", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "reasoning.json").read_text())
    assert results["measurement"]["command"].endswith("--seeds 42 --dataset_test_split validation")
    assert "`mixed` (GRPO)" in study.table(results)
    assert (tmp_path / "reasoning.png").stat().st_size > 0
    assert {
        p: p.read_bytes() for p in [*docs.glob("reasoning*"), *(docs / "results").glob("reasoning*")]
    } == before


def test_more_sft_row_gives_the_minutes_its_extra_steps_buy_at_the_references_rate(tmp_path, monkeypatch):
    """The control's extra minutes are its extra steps at the reference's own seconds per step (what it was sized
    by), not its wall seconds, which depend on what else ran beside it."""
    from studies import reasoning as study

    _more_sft(tmp_path, monkeypatch, [(42, 7000, 0.3, 0.1), (1, 7000, 0.2, 0.1)])
    results = study.summarize(tmp_path, [42, 1], "python -m studies.reasoning --arms more_sft")
    assert results["arms"] == [] and results["more_sft"]["reference_steps"] == 4000
    row = study.table(results).splitlines()[-1]
    assert row.startswith("| `more_sft` (no RL: 7000 SFT steps, not 4000) |")
    assert "**25.0%** (30.0% / 20.0%; seeds 42, 1)" in row
    assert row.endswith(f"| {3000 * 800 / 4000 / 60:.1f} more of SFT (at the reference's rate) |")


def test_a_study_of_the_control_alone_keeps_the_published_arms_and_figure(tmp_path, monkeypatch):
    """`--arms more_sft` with no GRPO runs in --out: the control is sized by the mixed row of the results file, the
    file keeps its GRPO rows (the new row carries its own measurement), and the figure of the arms is not redrawn."""
    from studies import reasoning as study

    _more_sft(tmp_path, monkeypatch, [(42, 7000, 0.3, 0.1)])
    out, docs = tmp_path, tmp_path / "docs"
    docs.mkdir()
    results = docs / "reasoning.json"
    with pytest.raises(SystemExit, match=r"error: the more_sft control needs the mixed arm's minutes"):
        study.mixed_seconds(out, [42], results)  # (no runs, no file)
    old_rows = [
        {"arm": arm, "start": 0.1, "after": {"42": 0.2}, "share_start": 0.1, "share_after": 0.0}
        | {"accuracy_within_after": None, "length_start": 6.0, "length_after": 6.0, "minutes": minutes}
        for arm, minutes in (("mixed", 1.5), ("direct", 1.2))
    ]
    old = {"measurement": {"command": "an earlier study"}, "arms": old_rows, "more_sft": None}
    results.write_text(json.dumps(old | {"tokens": None, "losses": None}))
    assert study.mixed_seconds(out, [42], results) == 90.0  # the mixed row's minutes
    (docs / "reasoning.png").write_bytes(b"published")
    study.main(
        ["--summarize", "--seeds", "42", "--out", str(out), "--docs", str(docs), "--results", str(results)]
    )
    new = json.loads(results.read_text())
    assert new["arms"] == old_rows and new["tokens"] is None
    assert new["measurement"] == old["measurement"]
    assert new["more_sft"]["after"] == {"42": 0.3} and new["more_sft"]["measurement"]["command"].startswith(
        "python -m studies.reasoning"
    )
    assert (docs / "reasoning.png").read_bytes() == b"published"
    # every row measured again: the new results replace the file's
    _grpo_run(
        study.run_dir(out, "mixed", 42), [(0, None, 0.1, 0.1, 6.0, None), (5, 120.0, 0.3, 0.0, 6.0, None)]
    )
    _grpo_run(
        study.run_dir(out, "direct", 42), [(0, None, 0.1, 0.0, 6.0, None), (5, 90.0, 0.1, 0.0, 6.0, None)]
    )
    assert study.mixed_seconds(out, [42], results) == 120.0  # the runs' own minutes first
    study.main(
        ["--summarize", "--seeds", "42", "--out", str(out), "--docs", str(docs), "--results", str(results)]
    )
    again = json.loads(results.read_text())
    assert [a["after"] for a in again["arms"]] == [{"42": 0.3}, {"42": 0.1}] and "measurement" not in again[
        "more_sft"
    ]
    assert (docs / "reasoning.png").read_bytes() != b"published"
