"""benchmarks/: argument parsing, the analytic FLOP count, and one minimal iteration of the cheap scripts."""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
from pathlib import Path

import pytest
from _numerics import assert_same_math

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))


def _duration(x: object) -> bool:
    """A measured time, or a number derived from times, has the form of one: a finite float >= 0. Tests check
    nothing more of it (its size depends on the machine's load)."""
    return isinstance(x, int | float) and math.isfinite(x) and x >= 0


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "name", ["vs_trl", "phases", "limit", "time_to_accuracy", "cost_curves", "processes"]
)
def test_help_and_defaults(name, capsys):
    mod = _load(name)
    with pytest.raises(SystemExit) as e:
        mod.build_parser().parse_args(["--help"])
    assert e.value.code == 0
    assert "--threads" in capsys.readouterr().out
    args = mod.build_parser().parse_args([])
    assert args.threads == 1


def test_shapes_parse():
    from _common import parse_shapes

    assert parse_shapes("36x8, 4x8") == [(36, 8), (4, 8)]


def test_analytic_flops_match_the_counter(seed_reference):
    """The analytic count without attention equals FlopCounterMode's on one real step (exact matmul shapes)."""
    from dataclasses import replace

    from _common import build_our_trainer

    limit = _load("limit")

    tr = build_our_trainer(seed_reference, 2, 4, 1, max_completion_length=3)
    counted, out = limit.counted_flops(tr)
    lengths = out.scored.first.lengths.tolist()
    arch = limit.Arch.from_config(tr.model.config)
    Tp = max(len(x) for x in tr.prompts.token_ids)
    expect = limit.step_flops(replace(arch, attention=False), 2, 4, Tp, lengths, beta=0.02)["total"]
    expect += limit.decoder_prompt_attention_flops(arch, 2, 4, Tp, lengths)
    assert counted == pytest.approx(expect, rel=1e-6)
    # the same step on the generic transformers forward computes every position: strictly more matmul work
    # whenever a completion ended before the longest one
    tr2 = build_our_trainer(seed_reference, 2, 4, 1, max_completion_length=3, grouped_forward=False)
    counted2, out2 = limit.counted_flops(tr2)
    lengths2 = out2.scored.first.lengths.tolist()
    if min(lengths2) < max(lengths2):
        assert (
            counted2
            > limit.step_flops(replace(arch, attention=False), 2, 4, Tp, lengths2, beta=0.02)["total"]
        )
    # sharing the prompt across the group never costs more
    assert (
        limit.step_flops(arch, 2, 4, Tp, [3] * 8, 0.02)["total"]
        < limit.step_flops(arch, 2, 4, Tp, [3] * 8, 0.02, False)["total"]
    )


def test_phases_one_step(seed_reference, capsys):
    phases = _load("phases")
    phases.main([*"--shapes 2x4 --steps 1 --warmup 0 --model_name_or_path".split(), seed_reference])
    out = capsys.readouterr().out
    assert "| **whole step** |" in out and "reference forward" in out
    assert "tensor operations per step" in out


def test_time_to_accuracy_dry_run(capsys):
    tta = _load("time_to_accuracy")
    tta.main([*"--dry_run --max_steps 3 --threads 2 -- --beta 0.02".split()])
    cmd = capsys.readouterr().out
    assert "--torch_num_threads 2" in cmd and "--max_steps 3" in cmd and cmd.strip().endswith("--beta 0.02")


def test_time_to_accuracy_curve(tmp_path):
    import json

    tta = _load("time_to_accuracy")
    rows = [
        {"step": 0, "eval/accuracy": 0.5},
        {"step": 1, "time/step": 0.5, "num_completions": 8},
        {"step": 2, "time/step": 0.25, "num_completions": 16, "eval/accuracy": 0.96},
    ]
    p = tmp_path / "metrics.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pts = tta.curve(p, {0: 10.0, 1: 10.5, 2: 11.0})
    assert [(q["step"], q["train_s"], q["wall_s"]) for q in pts] == [(0, 0.0, 0.0), (2, 0.75, 1.0)]
    first, sustained = tta.crossings(pts, 0.95)
    assert first["step"] == 2 and sustained["step"] == 2
    assert tta.crossings(pts, 0.98) == (None, None)
    tta.plot(pts, tmp_path / "c.png", "t")
    assert (tmp_path / "c.png").stat().st_size > 0


def test_time_to_accuracy_peers_dry_run(tmp_path, capsys):
    tta = _load("time_to_accuracy")
    argv = "--dry_run --peer trl,plain,default --seeds 7,8 --max_steps 3 --eval_limit 50 --output_dir"
    tta.main([*argv.split(), str(tmp_path), "--", "--beta", "0.0"])
    out = capsys.readouterr().out
    cmds = [line for line in out.splitlines() if line.startswith(sys.executable)]
    assert len(cmds) == 6  # each peer runs each seed
    trl, plain, default = cmds[:2], cmds[2:4], cmds[4:]
    # every peer evaluated at the same steps: a first crossing of a noisy curve depends on how often it is read
    assert all("--trl_run_json" in c and "--eval_steps 5" in c and c.endswith("-- --beta 0.0") for c in trl)
    assert all("--prompt_sampler uniform --explore_rounds 0 --dynamic_sampling false" in c for c in plain)
    assert not any("--prompt_sampler" in c for c in default)
    assert all("--eval_steps 5" in c and "--max_steps 3" in c and "eval_subset" in c for c in plain + default)
    assert "--seed 7" in cmds[0] and "--seed 8" in cmds[1]
    # every setting printed, side by side: TRL gets ours wherever its GRPOConfig has it
    assert "| setting | trl | ours_plain | ours_default |" in out
    assert (
        "| learning_rate | 0.002 | 0.002 | 0.002 |" in out and "| per_device_train_batch_size | 512 |" in out
    )
    assert "| gradient_checkpointing | False | - | - |" in out and "| explore_rounds | - | 0 | 3 |" in out


def test_time_to_accuracy_eval_subset(tmp_path):
    from tinygrpo.config import GRPOConfig
    from tinygrpo.problems import load_splits

    tta = _load("time_to_accuracy")
    tta.write_eval_subset(GRPOConfig(), 50, tmp_path)
    train, test = load_splits(str(tmp_path), "train", "test")
    full_train, full_test = load_splits("addition", "train", "test")
    assert len(train) == len(full_train) and test[:] == full_test[:50]


def test_trl_reward_is_our_strict_verifier_on_our_decoding(tok):
    """TRL's completions (decoded without special tokens, cut after the first <eos>) + <eos> where the ids end on it
    score as our trainer's decoding of the same ids does."""
    from _tta import strict_accuracy_for_trl

    from rewards import accuracy
    from tinygrpo.rollout import decode_rows

    eos, pad = tok.eos_token_id, tok.pad_token_id
    digits = {c: tok.convert_tokens_to_ids(c) for c in "0123456789+="}
    cases = ["12", "12<eos>", "012<eos>", "1+2<eos>", "", "<eos>", "7<pad>2<eos>", "12=<eos>"]
    ids = [
        [
            eos if t == "e" else pad if t == "p" else digits[t]
            for t in c.replace("<eos>", "e").replace("<pad>", "p")
        ]
        for c in cases
    ]
    texts = tok.batch_decode(ids, skip_special_tokens=True)  # what TRL hands a reward function
    answers = ["12", "12", "12", "3", "0", "0", "72", "12"]
    reward = strict_accuracy_for_trl(tok.eos_token, eos)
    ours = accuracy(completions=decode_rows(tok, ids), answer=answers)
    assert reward(completions=texts, completion_ids=ids, answer=answers, trainer_state=None) == ours
    assert ours == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def test_time_to_accuracy_trl_peer(seed_reference, tmp_path, capsys):
    """TRL's GRPOTrainer, 2 steps evaluated after each on 50 problems: the table has its row, and the clock leaves the
    evaluations out (structurally; no speed is asserted)."""
    # CI installs .[test]: there a missing trl fails, it never skips
    importlib.import_module("trl") if os.environ.get("CI") else pytest.importorskip("trl")
    tta = _load("time_to_accuracy")
    argv = "--peer trl --seeds 3 --max_steps 2 --eval_steps 1 --eval_limit 50 --model_name_or_path"
    result = tta.main([*argv.split(), seed_reference, "--output_dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| gradient_checkpointing | False |" in out  # the settings came first
    assert "| trl | 3 |" in out and "| trl | 1 (3) |" in out  # the run's row and its median
    (run,) = result["runs"]
    pts = run["points"]
    assert [p["step"] for p in pts] == [0, 1, 2] and [p["completions"] for p in pts] == [0, 512, 1024]
    assert all(p["eval_s"] > 0 and 0 <= p["train_s"] <= p["wall_s"] for p in pts)
    for i, p in enumerate(pts[2:], start=2):  # the step-0 evaluation ran before the clock started
        assert p["wall_s"] - p["train_s"] >= sum(q["eval_s"] for q in pts[1:i])
    assert pts[-1]["train_s"] > pts[1]["train_s"] > 0
    for ext in ("md", "json", "png"):
        assert (tmp_path / f"time_to_accuracy.{ext}").stat().st_size > 0


def test_vs_trl_one_iteration(seed_reference, capsys):
    # CI installs .[test]: there a missing trl fails, it never skips
    importlib.import_module("trl") if os.environ.get("CI") else pytest.importorskip("trl")
    vs = _load("vs_trl")
    argv = "--init reference --shapes 2x4 --reps 1 --steps 1 --warmup 0 --model_name_or_path"
    results = vs.main(["--profile_steps", "2", *argv.split(), seed_reference])
    out = capsys.readouterr().out
    assert "| 2x4 | 8 |" in out
    assert "| 2x4 | ours |" in out and "| 2x4 | TRL |" in out  # where the steps go, both trainers
    for who in ("ours_split", "trl_split"):
        split = results[0][who]
        assert split["arithmetic_calls"] > 0 and split["other_calls"] > 0
        # measured times: only their form (profiler self time against wall-clock steps depends on the load)
        assert all(_duration(split[k]) for k in ("arithmetic_ms", "other_ms"))
        assert results[0][who.replace("split", "step_s")] and all(
            _duration(t) for block in results[0][who.replace("split", "step_s")] for t in block
        )


def test_op_split_counts_the_arithmetic_kernels_apart():
    """Self times by kind: the matmuls and GELU a computation calls land in "arithmetic", everything else in
    "other", one count per call, each call counted once (an addmm inside a linear is the addmm's)."""
    import torch
    from _opsplit import OpSplit, StepProfile, median_split

    x, w, b = torch.randn(64, 32), torch.randn(16, 32), torch.randn(16)
    prof = StepProfile()
    prof.start()
    for _ in range(2):  # two "steps"
        y = torch.nn.functional.linear(x, w, b)  # linear (other) -> t (other), addmm (arithmetic)
        y = torch.nn.functional.gelu(y @ w[:, :16].T)  # mm, gelu (arithmetic)
        (y + 1).sum()  # add, sum (other)
    split = prof.stop(steps=2)
    assert split.arithmetic_calls == 3  # addmm, mm, gelu per step
    assert split.other_calls >= 4  # linear, t, add, sum (and what they call: transposes, views)
    assert _duration(split.arithmetic_ms) and _duration(split.other_ms)  # (times: their form, not their size)
    # steps profiled one at a time are read field by field at their median: one slow step does not move it
    steps = [OpSplit(1.0, 2, 3.0, 4), OpSplit(5.0, 6, 7.0, 8), OpSplit(900.0, 0, 0.0, 0)]
    assert median_split(steps) == OpSplit(5.0, 2, 3.0, 4)


def test_the_random_pair_is_one_function_in_tiny_lm_and_in_gpt2(tmp_path):
    # vs_trl's like-for-like start: the tiny_lm and the transformers GPT-2 it writes, loaded back the way each
    # trainer loads them, give the same next-token distributions (two independent implementations of one network).
    import torch
    from transformers import AutoModelForCausalLM

    import tiny_lm  # noqa: F401  (registers the model type)

    common = _load("_common")
    tiny_dir, gpt2_dir = common.ensure_random_pair(tmp_path, seed=3, n_embd=32, n_layer=3, n_head=2)
    # float64: two implementations sum in different orders (tests/_numerics.py)
    tiny = AutoModelForCausalLM.from_pretrained(tiny_dir).eval().double()
    gpt2 = AutoModelForCausalLM.from_pretrained(gpt2_dir).eval().double()
    assert type(tiny).__name__ == "TinyLMForCausalLM" and type(gpt2).__name__ == "GPT2LMHeadModel"
    ids = torch.randint(2, 14, (4, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = tiny(ids).logits, gpt2(ids).logits
    assert_same_math(a, b)
    assert a.std() > 0.01  # a function that tells tokens apart, not a constant
    assert common.ensure_random_pair(tmp_path, seed=3, n_embd=32, n_layer=3, n_head=2) == (tiny_dir, gpt2_dir)


def test_cost_curves_one_point_and_its_report(tmp_path):
    # One small point measured in this process (the script runs each in a fresh one), then the tables and the figure.
    import argparse

    cc = _load("cost_curves")
    pt = cc.Point(n_embd=64, n_layer=2, max_completion_length=3, P=2, G=4)
    args = argparse.Namespace(threads=1, warmup=1, min_seconds=0.01, trl_steps=1)
    r = cc.measure_ours(pt, args)
    # Nothing here compares measured durations: on a loaded machine any relation between them can fail (the phase
    # shares, medians of phases over the median step, once added to 1.066). Times are checked for their form only;
    # what is counted (steps, lengths, FLOPs, memory) and what is defined from a time (per second) is checked exactly.
    assert 3 <= r["steps"] <= 20  # the loop's own bounds
    # (> 0 as well: a step that took no time would divide by zero below)
    assert _duration(r["step_ms"]) and r["step_ms"] > 0
    assert r["completions_per_s"] == pytest.approx(8 / (r["step_ms"] / 1000))
    assert 1 <= r["mean_length"] <= 3  # a random function: near max_completion_length, never past it
    assert r["gflop_per_step"] > 0
    assert all(_duration(r[k]) for k in ("achieved_gflops", "matmul_gflops", "bound_fraction"))
    assert r["phases"].keys() == {"generate", "ref_old_logps", "optimize"}  # generate, reference, update
    # shares of the step: finite and >= 0, with no bound on their sum
    assert all(_duration(v) for v in r["phases"].values())
    assert r["peak_rss_mib"] >= r["base_rss_mib"] > 0
    results = {"length": [{"point": cc.asdict(pt), "ours": r, "trl": None}]}
    text = cc.report(results, argparse.Namespace(threads=1, min_seconds=0.01, warmup=1))
    assert "| 3 |" in text and "n/a" in text  # our row, and no TRL figure where TRL did not run
    cc.figure(results, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0


def test_vs_trl_on_a_task_scores_both_trainers_with_its_verifier(tmp_path, capsys):
    """--task reverse: both trainers train on reverse's problems from one reference, rewarded by exact_match (TRL's
    through the wrapper that puts <eos> back). The wrapper agrees with the verifier on ids that end or not in EOS."""
    importlib.import_module("trl") if os.environ.get("CI") else pytest.importorskip("trl")
    import train_sft

    vs = _load("vs_trl")
    reward = vs.TaskVerifierForTRL("exact_match", eos_token_id=1)
    got = reward(completions=["cba", "cba", "cb"], completion_ids=[[5, 1], [5, 6], [1]], answer=["cba"] * 3)
    assert got == [1.0, 0.0, 0.0]
    ref = tmp_path / "ref"
    sft = "--task reverse --n_layer 1 --n_embd 32 --max_steps 30 --batch_size 32 --eval_split  --threads 1"
    assert train_sft.main([*sft.split(" "), "--output_dir", str(ref)]) == 0
    argv = "--task reverse --shapes 2x4 --reps 1 --steps 1 --warmup 0 --profile_steps 0 --max_completion_length 16"
    results = vs.main([*argv.split(), "--model_name_or_path", str(ref)])
    assert "| 2x4 | 8 |" in capsys.readouterr().out and results[0]["init"] == "reference"
