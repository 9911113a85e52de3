"""The reasoning experiment's pieces: the mixed reference's targets (SFTConfig.mix_column / mix_share), the format
detector of multiplication, the share and accuracy of each format (held-out and sampled), and the study's table."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from datasets import Dataset

from tiny_lm import TinyLMConfig, TinyLMForCausalLM, build_tokenizer
from tiny_lm.tokenization_tiny_lm import EOS_TOKEN as EOS
from tinygrpo.checks import ConfigError
from tinygrpo.evaluation import Verifier, format_counts, format_metrics, held_out_metrics
from tinygrpo.prompts import left_pad
from tinygrpo.rollout import SamplingParams
from tinygrpo.sft import SFTConfig, training_targets
from tinygrpo.task import get_task
from tinygrpo.tasks import multiplication


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
    cfg = SFTConfig(dataset="multiplication", mix_column="worked", mix_share=0.1, seed=3)
    targets = training_targets(cfg, train)
    worked = [t == w for t, w in zip(targets, train["worked"], strict=True)]
    assert sum(worked) == 20  # exactly the share, of 200
    assert all(t == a for t, a, w in zip(targets, train["answer"], worked, strict=True) if not w)
    assert training_targets(cfg, train) == targets  # the same problems on every call at one seed
    other = training_targets(
        SFTConfig(dataset="multiplication", mix_column="worked", mix_share=0.1, seed=4), train
    )
    assert other != targets and sum(t != a for t, a in zip(other, train["answer"], strict=True)) == 20
    plain = SFTConfig(dataset="multiplication", mix_column="worked", mix_share=0.0)
    assert training_targets(plain, train) == train["answer"]  # share 0: the column alone, mix_column unread
    everything = SFTConfig(dataset="multiplication", mix_column="worked", mix_share=1.0)
    assert training_targets(everything, train) == train["worked"]


def test_mix_errors_name_the_field():
    with pytest.raises(ConfigError, match="mix_share=0.5 needs mix_column"):
        SFTConfig(mix_share=0.5)
    with pytest.raises(ConfigError, match="mix_share"):
        SFTConfig(mix_column="worked", mix_share=1.5)
    for share in (0.1, 0.0):  # (a column named is a column checked, used or not)
        cfg = SFTConfig(dataset="multiplication", mix_column="nope", mix_share=share)
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
    from tinygrpo.task import Formats

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


def test_reasoning_study_table_reads_finished_runs(tmp_path):
    """studies.reasoning: one row per GRPO arm from its runs (the median over seeds of the first and last
    evaluation), and the more-SFT control's row from its sft_summary.json."""
    from studies import reasoning as study

    for arm, shares in (("mixed", (0.8, 0.9, 0.85)), ("direct", (0.0, 0.0, 0.0))):
        for seed, share in zip((42, 1, 2), shares, strict=True):
            d = study.run_dir(tmp_path, arm, seed)
            d.mkdir(parents=True)
            (d / "summary.json").write_text("{}")
            first = {"step": 0, "eval/accuracy": 0.03, "eval/format/scratchpad": 0.0, "eval/mean_length": 5.0}
            last = {"step": 300, "time/elapsed": 600.0 + seed, "eval/accuracy": 0.3 + share / 2}
            last |= {"eval/format/scratchpad": share, "eval/mean_length": 5 + 30 * share}
            (d / "metrics.jsonl").write_text(json.dumps(first) + "\n" + json.dumps(last) + "\n")
    lines = study.table(tmp_path, [42, 1, 2]).splitlines()
    assert len(lines) == 4  # head, rule, mixed, direct (no more_sft run)
    mixed = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert mixed[0] == "`mixed` (GRPO)" and mixed[1] == "3.0%"
    assert mixed[2].startswith("**72.5%** (70.0% / 75.0% / 72.5%")  # median of 0.3 + share / 2
    assert mixed[3] == "0.0% -> **85.0%**" and mixed[5] == "5.0 -> 30.5" and mixed[6] == "10.0"
    direct = [c.strip() for c in lines[3].split("|")[1:-1]]
    assert direct[3] == "0.0% -> **0.0%**"


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
            flag["--eval_split"] == "validation"
            and flag["--logging_steps"] == "1"
            and cmd[-2:] == ["--max_steps", "2"]
        )


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
    from studies.reasoning import token_moves

    assert token_moves(tmp_path) == ""  # no completions logged
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
    lines = token_moves(tmp_path).splitlines()
    assert lines[0].startswith("1 logged completions of ")
    assert lines[4] == "| the first | 1 | 0.5000 | 0.600 |"
    assert lines[5] == "| the other digits | 2 | 0.1000 | 0.300 |"  # 2 and 4: |0.9 - 1|, |1.1 - 1|
    assert lines[6] == "| the syntax | 3 | 0.0000 | 0.033 |"


def test_reasoning_study_on_validation_writes_beside_its_runs_never_over_the_published_docs(tmp_path):
    """A choice made on validation (`--eval_split validation`) writes its table and figures into --out; only the
    test split's runs write docs/ by default."""
    from studies import reasoning as study

    docs = study.REPO / "docs"
    before = {p.name: p.read_bytes() for p in docs.glob("reasoning*")}
    d = study.run_dir(tmp_path, "mixed", 42)
    d.mkdir(parents=True)
    (d / "summary.json").write_text("{}")
    rows = [{"step": 0, "eval/accuracy": 0.1, "eval/format/scratchpad": 0.1, "eval/mean_length": 6.0}]
    rows.append({"step": 5, "time/elapsed": 60.0, "eval/accuracy": 0.2, "eval/format/scratchpad": 0.5})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    study.main(["--summarize", "--eval_split", "validation", "--seeds", "42", "--out", str(tmp_path)])
    assert "`mixed` (GRPO)" in (tmp_path / "reasoning_table.md").read_text()
    assert (tmp_path / "reasoning.png").stat().st_size > 0
    assert {p.name: p.read_bytes() for p in docs.glob("reasoning*")} == before


def test_more_sft_row_gives_the_minutes_its_extra_steps_buy_at_the_references_rate(tmp_path, monkeypatch):
    """The control's extra minutes are its extra steps at the reference's own seconds per step (what it was sized
    by), not its wall seconds, which depend on what else ran beside it."""
    from studies import reasoning as study

    monkeypatch.setattr(study, "REPO", tmp_path)
    ref = tmp_path / "checkpoints" / study.MIXED
    ref.mkdir(parents=True)
    (ref / "sft_summary.json").write_text(json.dumps({"steps": 4000, "train_seconds": 800.0}))
    for seed, acc in ((42, 0.3), (1, 0.2)):
        d = study.run_dir(tmp_path, "more_sft", seed)
        d.mkdir(parents=True)
        summary = {"steps": 7000, "train_seconds": 5000.0 + seed, "eval_accuracy": acc}
        summary["eval_formats"] = {"scratchpad": 0.1, "direct": 0.9, "other": 0.0}
        (d / "sft_summary.json").write_text(json.dumps(summary))
    row = study.table(tmp_path, [42, 1]).splitlines()[-1]
    assert row.startswith("| `more_sft` (no RL: 7000 SFT steps, not 4000) |")
    assert "**25.0%** (30.0% / 20.0%; seeds 42, 1)" in row
    assert row.endswith(f"| {3000 * 800 / 4000 / 60:.1f} more of SFT (at the reference's rate) |")
