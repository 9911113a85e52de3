"""GRPOTrainer end to end (train_grpo.main on the seed bank), and against an exact tabular oracle.

Runs are tiny on purpose (the 36 seed-bank prompts, a 26 k-parameter reference, completions of <= 3 tokens), so the
whole file takes well under a minute and a half on 2 cores; the 2-process launch is the slowest test (~20 s).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _numerics import assert_same_math, same_math
from _runs import ENV, LAUNCH, cli, launch_two, reference_trainer
from _trainer_table import ANSWERS, N_ANS, N_B, N_Q, build_table_policy, build_table_tokenizer
from safetensors.torch import load_file
from torch.distributions import Categorical

import train_grpo
from tinygrpo.data.problems import load_split
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.round import Batch
from tinygrpo.rollout.sampling import sample_completions
from tinygrpo.run.config import GRPOConfig
from tinygrpo.run.launch import load_model_and_tokenizer
from tinygrpo.run.logs import TIMING_PREFIXES, read_jsonl
from tinygrpo.run.trainer import GRPOTrainer

REPO = Path(train_grpo.__file__).resolve().parent


def run_main(seed_reference: str, out: Path, *extra: str) -> int:
    """train_grpo.main on the seed bank with small defaults; `extra` flags override them (later flags win). Plain
    GRPO (uniform order, no explore rounds): these tests count what one round samples (tests/test_exploration.py
    covers the samplers)."""
    argv = [
        "--model_name_or_path",
        seed_reference,
        *"--dataset_name seed_bank --dataset_test_split".split(),
        "",
        *"--num_generations 4 --per_device_train_batch_size 32 --max_completion_length 3 --max_steps 2".split(),
        *"--logging_steps 1 --save_steps 0 --learning_rate 1e-3 --disable_tqdm true --make_plots false".split(),
        *"--dynamic_sampling false --prompt_sampler uniform --explore_rounds 0 --output_dir".split(),
        str(out),
        *extra,
    ]
    return train_grpo.main(argv)


def metric_rows(out: Path) -> list[dict]:
    """metrics.jsonl rows of training steps (the step-0 evaluation row left out)."""
    return [r for r in read_jsonl(out / "metrics.jsonl") if r["step"] > 0]


# ================================================================================================ end to end


@pytest.mark.slow
def test_two_step_run_changes_every_parameter_and_writes_all_outputs(seed_reference, tmp_path):
    out = tmp_path / "run"
    assert (
        run_main(
            seed_reference,
            out,
            *"--dataset_test_split train --allow_overlapping_splits true --make_plots true".split(),
        )
        == 0
    )

    for name in ("metrics.jsonl", "completions.jsonl", "plots.png", "summary.json", "config.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]  # the step-0 evaluation, then one row per step
    assert "eval/accuracy" in rows[0] and "eval/accuracy" in rows[-1]
    assert all(r["num_completions"] == 32 * r["step"] for r in rows[1:])
    completions = read_jsonl(out / "completions.jsonl")
    assert len(completions) == 2 * GRPOConfig().num_completions_to_print and {
        c["step"] for c in completions
    } == {1, 2}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["num_completions"] == 64
    assert summary["eval_before"]["eval/accuracy"] == rows[0]["eval/accuracy"]
    assert summary["eval_after"]["eval/accuracy"] == rows[-1]["eval/accuracy"]
    assert json.loads((out / "config.json").read_text())["max_steps"] == 2
    assert (out / "plots.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Every trainable tensor moved (AdamW moves any tensor with a non-zero gradient anywhere).
    before = load_file(str(Path(seed_reference) / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    assert before.keys() == after.keys() and len(before) > 10
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert unchanged == []

    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny_lm  # noqa: F401  (registers the model type)

    model = AutoModelForCausalLM.from_pretrained(out / "final")
    tok = AutoTokenizer.from_pretrained(out / "final")
    for k, v in model.state_dict().items():
        if k in after:
            torch.testing.assert_close(v, after[k], rtol=0, atol=0)
    ids = tok(["3+4="], return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape == (1, 4, len(tok))


@torch.no_grad()
def exact_expected_accuracy(path: str) -> float:
    """E[strict accuracy reward] of the policy at `path` on the seed bank, exactly: the mean over prompts of
    pi(answer digits + <eos> | prompt), by teacher forcing one plain forward (independent of the rollout code)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny_lm  # noqa: F401

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    ds = load_split("seed_bank", "train")
    total = 0.0
    for prompt, answer in zip(ds["prompt"], ds["answer"], strict=True):
        p = tok(prompt)["input_ids"]
        c = tok(answer)["input_ids"] + [tok.eos_token_id]
        logp = model(input_ids=torch.tensor([p + c])).logits[0].log_softmax(-1)  # (T, V)
        total += float(sum(logp[len(p) - 1 + t, c[t]] for t in range(len(c))).exp())
    return total / len(ds)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_short_run_raises_the_reward(seed_reference, tmp_path, seed):
    # 60 steps x 16 prompts x G=8 (~3 s). Measured over seeds 0-3: the exact expected reward goes 0.150 -> 0.26-0.27
    # and the logged sampled reward from ~0.13 (first 10 steps) to ~0.25 (last 10).
    out = tmp_path / "run"
    rc = run_main(
        seed_reference,
        out,
        *"--num_generations 8 --per_device_train_batch_size 128 --max_steps 60 --seed".split(),
        str(seed),
    )
    assert rc == 0
    before, after = exact_expected_accuracy(seed_reference), exact_expected_accuracy(str(out / "final"))
    assert after > before + 0.06, (before, after)
    rewards = [r["reward"] for r in metric_rows(out)]
    assert len(rewards) == 60
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.05, (first, last)


@pytest.mark.slow
def test_num_iterations_2_moves_the_ratio_and_num_iterations_1_keeps_it_exactly_one(seed_reference, tmp_path):
    out1, out2 = tmp_path / "mu1", tmp_path / "mu2"
    assert run_main(seed_reference, out1, *"--max_steps 3 --epsilon 0.01".split()) == 0
    assert (
        run_main(
            seed_reference,
            out2,
            *"--max_generations 3 --epsilon 0.01 --num_iterations 2 --learning_rate 3e-3".split(),
        )
        == 0
    )
    mu1, mu2 = metric_rows(out1), metric_rows(out2)
    assert len(mu1) == len(mu2) == 3
    for r in mu1:  # mu = 1: old log-probs ARE the current ones
        assert r["ratio_is_exactly_one"] == 1
        assert r["ratio"] == 1.0  # exactly
        assert r["clip_ratio/region"] == 0.0
    for r in mu2:  # the second pass sees a policy moved by the first one
        assert "ratio_is_exactly_one" not in r
        assert r["ratio"] != 1.0
    assert max(r["clip_ratio/region"] for r in mu2) > 0  # with epsilon 0.01 the clip acts
    assert max(r["clip_ratio/high"] + r["clip_ratio/low"] for r in mu2) > 0


@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_reference_is_built_only_when_beta_is_positive(seed_reference, tmp_path, monkeypatch, beta):
    from tinygrpo.run import launch

    loads, trainers = [], []
    real_load, real_train = load_model_and_tokenizer, GRPOTrainer.train

    def counting_load(path, what):
        loads.append(what)
        return real_load(path, what)

    def recording_train(self, *args):
        trainers.append(self)
        return real_train(self, *args)

    monkeypatch.setattr(launch, "load_model_and_tokenizer", counting_load)  # (train_grpo.main is launch's)
    monkeypatch.setattr(GRPOTrainer, "train", recording_train)
    out = tmp_path / "run"
    assert run_main(seed_reference, out, "--beta", str(beta), "--kl_estimator", "k3") == 0
    (trainer,) = trainers
    rows = metric_rows(out)
    if beta == 0:
        assert loads == ["model_name_or_path"]
        assert trainer.ref_model is None
        assert all("kl" not in r for r in rows)
    else:
        assert loads == ["model_name_or_path", "ref_model_name_or_path"]
        assert trainer.ref_model is not None
        assert not any(p.requires_grad for p in trainer.ref_model.parameters())
        ref_weights = load_file(str(Path(seed_reference) / "model.safetensors"))
        for k, v in trainer.ref_model.state_dict().items():  # frozen: still the reference after training
            if k in ref_weights:
                assert torch.equal(v, ref_weights[k]), k
        assert all("kl" in r for r in rows)
        assert abs(rows[0]["kl"]) < 1e-6  # step 1: the policy IS the reference
        assert rows[-1]["kl"] > 0  # step 2: it moved


# ================================================================================================ the EOS mask


def _first_eos(ids: torch.Tensor, eos: int) -> torch.Tensor:
    """(B, T) -> (B,) index of the first EOS, T if none."""
    T = ids.size(1)
    pos = torch.arange(T).expand_as(ids)
    return torch.where(ids == eos, pos, torch.full_like(pos, T)).amin(1)


def test_loss_ignores_tokens_after_eos(seed_reference, tmp_path):
    trainer = reference_trainer(
        seed_reference, tmp_path, dtype="float64"
    )  # (two forwards: tests/_numerics.py)
    eos, V = trainer.tokenizer.eos_token_id, len(trainer.tokenizer)
    batch = trainer.generator.generate().batch
    first = _first_eos(batch.completion_ids, eos)
    T = batch.completion_ids.size(1)
    pos = torch.arange(T).expand_as(batch.completion_ids)
    after = pos > first[:, None]
    # The trainer's mask: 1 up to and including the first EOS, 0 after it.
    torch.testing.assert_close(batch.completion_mask, (~after).float())
    early = (first < T - 1) & (batch.advantages != 0)  # rows with masked tokens AND a say in the loss
    assert early.sum() >= 2

    # With num_iterations = 1 the loss VALUE is -mean(A) whatever the tokens (the ratio is exp(logp - logp.detach())),
    # so the property is checked on the gradient, where the log-probs of the kept tokens enter.
    model = trainer.model

    def loss_and_grad(b: Batch):
        model.zero_grad(set_to_none=True)
        (mb,) = trainer.update.prepare(b)
        loss, stats = trainer.update.loss(mb)
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return loss.detach(), grad, dict(zip(stats.names, stats.sums, strict=True))

    loss, grad, sums = loss_and_grad(batch)
    garbage = torch.randint(2, V, batch.completion_ids.shape, generator=torch.Generator().manual_seed(0))
    dirty = Batch(**{**batch.__dict__, "completion_ids": torch.where(after, garbage, batch.completion_ids)})
    assert not torch.equal(dirty.completion_ids, batch.completion_ids)
    loss_dirty, grad_dirty, sums_dirty = loss_and_grad(dirty)
    assert_same_math(loss_dirty, loss)
    assert_same_math(grad_dirty, grad)
    for k in sums:
        assert_same_math(sums_dirty[k].double(), sums[k].double(), msg=k)
    # control: changing a token the mask keeps (the EOS of a row with a non-zero advantage) changes the gradient
    row = int(torch.nonzero(early)[0])
    kept = batch.completion_ids.clone()
    kept[row, first[row]] = 2  # a digit instead of <eos>
    _, grad_kept, _ = loss_and_grad(Batch(**{**batch.__dict__, "completion_ids": kept}))
    assert (grad_kept - grad).abs().max() > 1e-4


def test_sample_completions_mask_ends_at_first_eos(seed_reference):
    model, tok = load_model_and_tokenizer(seed_reference, "model_name_or_path")
    ds = load_split("seed_bank", "train")
    enc = tok(list(ds["prompt"]), padding=True, return_tensors="pt")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    ro = sample_completions(
        model.eval(),
        enc["input_ids"],
        enc["attention_mask"],
        4,
        SamplingParams(6, temperature=1.5),
        torch.Generator().manual_seed(0),
        eos_token_id=eos,
        pad_token_id=pad,
    )
    ids, mask = ro.completion_ids, ro.completion_mask
    T = ids.size(1)
    first = _first_eos(ids, eos)
    pos = torch.arange(T).expand_as(ids)
    assert ((first > 0) & (first < T - 1)).any()  # some rows stop early ...
    torch.testing.assert_close(mask.bool(), pos <= first[:, None])  # ... and the mask ends at the first EOS
    assert (ids[pos > first[:, None]] == pad).all()  # everything after it is padding
    assert torch.equal(ro.is_eos, first < T)


# ================================================================================================ processes, resume


@pytest.mark.slow
@pytest.mark.slow
def test_fsdp_config_on_cpu_says_it_runs_data_parallel(seed_reference, tmp_path):
    # accelerate drops FSDP on CPU (cpu=True): the run goes on as plain data parallelism, and says so in one line
    # instead of letting the user believe the model is sharded.
    out = tmp_path / "fsdp"
    cmd = [*LAUNCH, "--config_file", str(REPO / "configs/accelerate/fsdp.yaml"), "train_grpo.py"]
    cmd += cli(seed_reference, out, *"--max_steps 1 --save_steps 0 --dataset_test_split none".split())
    proc = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [
        line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("note: the accelerate")
    ]
    assert len(notes) == 1 and "as MULTI_CPU" in notes[0] and "2 process(es)" in notes[0], notes


@pytest.mark.slow
def test_two_process_cpu_launch_logs_global_metrics_once(seed_reference, tmp_path):
    # `accelerate launch --cpu --num_processes 2` starts ONE process (its simple launcher ignores num_processes
    # without mpirun); two CPU ranks need the torchrun launcher (--multi_gpu) plus ACCELERATE_USE_CPU, which makes
    # accelerate pick the gloo backend (DistributedType.MULTI_CPU).
    out = tmp_path / "ddp"
    argv = [
        "--model_name_or_path",
        seed_reference,
        *"--dataset_name seed_bank --dataset_test_split train --allow_overlapping_splits true --num_generations 4 --per_device_train_batch_size 32".split(),
        *"--max_completion_length 3 --max_steps 2 --logging_steps 1 --disable_tqdm true --make_plots false".split(),
        *"--dynamic_sampling false --lr_scheduler_type linear --explore_rounds 0 --output_dir".split(),
        str(out),
    ]
    proc = launch_two(argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["num_processes"] == 2
    assert (out / "checkpoint-2" / "batch_generator_1.json").is_file()  # rank 1 took part
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]  # one file, each step once (rank 1 writes nothing)
    for r in rows[1:]:
        assert r["num_completions"] == 2 * 32 * r["step"]  # both processes' completions
        assert r["trained_completions"] == 2 * 32
        assert r["reward"] * 64 == pytest.approx(round(r["reward"] * 64))
    # One schedule step per optimizer step whatever the process count: linear decay over 2 steps from 2e-3
    # (accelerate's prepared scheduler would step twice per call with 2 processes and log 0.0 here).
    assert rows[1]["learning_rate"] == pytest.approx(GRPOConfig.learning_rate / 2)
    assert len(read_jsonl(out / "completions.jsonl")) == 2 * GRPOConfig().num_completions_to_print
    assert proc.stdout.count("held-out greedy accuracy") == 1


TOKEN_KEYS = ("tokens", "token_advantage", "token_p_old", "token_p_new", "token_ratio", "token_entropy")


@torch.no_grad()
def teacher_forced(path: str, prompt: str, tokens: list[str], temperature: float) -> tuple[list, list]:
    """Each token's probability and the entropy at its position under the model at `path`, at `temperature`, by one
    plain forward of prompt + tokens (independent of the backends and of the rollout code)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny_lm  # noqa: F401

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    p, c = tok(prompt)["input_ids"], tok.convert_tokens_to_ids(tokens)
    logp = (model(input_ids=torch.tensor([p + c])).logits[0] / temperature).log_softmax(-1)  # (T, V)
    at = [logp[len(p) - 1 + t] for t in range(len(c))]
    return [float(a[i].exp()) for a, i in zip(at, c, strict=True)], [float(-(a.exp() * a).sum()) for a in at]


@pytest.mark.slow
def test_completions_log_what_the_update_did_to_each_token(seed_reference, tmp_path):
    """Each logged completion's tokens with the advantage the loss gave them, their probability before the step's
    update (the policy that sampled them) and after it, the ratio and the entropy; before and after checked by a
    plain forward of the models they come from (step 1's before: the reference; the last step's after: final/)."""
    out = tmp_path / "run"
    T = 0.7  # the log-probs are the loss's, at the run's temperature
    assert run_main(seed_reference, out, "--temperature", str(T)) == 0
    rows = read_jsonl(out / "completions.jsonl")
    assert len(rows) == 2 * GRPOConfig().num_completions_to_print
    ratios = []
    G = json.loads((out / "config.json").read_text())["num_generations"]
    for step in (1, 2):  # whole groups, each under its own index
        groups = [r["group"] for r in rows if r["step"] == step]
        assert len(set(groups)) == len(groups) // G and all(groups.count(g) == G for g in groups)
    for r in rows:
        n = len(r["tokens"])
        assert "".join(r["tokens"]) == r["completion"] and n >= 1
        assert [len(r[k]) for k in TOKEN_KEYS] == [n] * len(TOKEN_KEYS)
        assert r["token_advantage"] == pytest.approx([r["advantage"]] * n, rel=1e-3, abs=1e-4)  # plain GRPO
        for old, new, ratio, entropy in zip(*(r[k] for k in TOKEN_KEYS[2:]), strict=True):
            assert 0 < old <= 1 and 0 < new <= 1 and entropy >= 0
            assert ratio == pytest.approx(new / old, rel=2e-3)  # each rounded to 4 significant digits
            ratios.append(ratio)
    assert any(abs(x - 1) > 0.01 for x in ratios)  # the update moved some token's probability
    for step, key, path in ((1, "token_p_old", seed_reference), (2, "token_p_new", str(out / "final"))):
        for r in (r for r in rows if r["step"] == step):
            probs, entropies = teacher_forced(path, r["prompt"], r["tokens"], T)
            assert r[key] == pytest.approx(probs, rel=1e-3, abs=1e-6), (step, r["completion"])
            if key == "token_p_new":
                assert r["token_entropy"] == pytest.approx(entropies, rel=1e-3, abs=1e-6)


def test_the_logged_completions_are_whole_groups_with_signal_first():
    from types import SimpleNamespace

    from tinygrpo.run.logs import logged_rows

    G = 4  # 5 groups, of which 1 and 3 have signal
    first = SimpleNamespace(
        completion_ids=torch.zeros(5 * G, 3),
        idx=[7, 8, 9, 10, 11],
        has_signal=torch.tensor([0, 1, 0, 1, 0]).bool(),
    )
    assert logged_rows(first, 8) == [4, 5, 6, 7, 12, 13, 14, 15]
    assert logged_rows(first, 10) == [4, 5, 6, 7, 12, 13, 14, 15, 0, 1]  # then the others, in sampling order
    assert logged_rows(first, 100) == [
        *range(4, 8),
        *range(12, 16),
        *range(0, 4),
        *range(8, 12),
        *range(16, 20),
    ]
    first.has_signal = torch.zeros(5, dtype=torch.bool)
    assert logged_rows(first, 6) == list(range(6))  # no signal anywhere: the first rows, as sampled


def test_logging_the_tokens_changes_nothing_about_training(seed_reference, tmp_path):
    """The forwards before and after a logging step's update draw from no generator and leave the model as it was:
    with dropout on (the generic backend, whose forward in train mode draws from torch's generator) two steps take
    the same weights bit for bit whether they log their tokens or not."""
    weights = {}
    for count in (8, 0):
        t = reference_trainer(
            seed_reference,
            tmp_path / str(count),
            grouped_forward=False,
            logging_steps=1,
            num_completions_to_print=count,
        )
        for m in t.model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.1
        state = torch.get_rng_state()
        t.model(input_ids=torch.tensor([[3, 4, 5]]))
        assert not torch.equal(state, torch.get_rng_state())  # the dropout is live: a forward draws
        torch.manual_seed(0)
        outs = [t.training_step() for _ in range(2)]
        assert all((o.tokens is not None) == bool(count) for o in outs) and t.model.training
        for o in (o for o in outs if o.tokens is not None):  # no graph kept alive past the forward
            assert not any(p.requires_grad for p in (o.tokens.before.logp, o.tokens.after.entropy))
        weights[count] = {k: v.clone() for k, v in t.model.state_dict().items()}
    assert all(torch.equal(weights[8][k], weights[0][k]) for k in weights[0])


@pytest.mark.slow
def test_resume_continues_exactly(seed_reference, tmp_path, capsys):
    out, straight = tmp_path / "resumed", tmp_path / "straight"
    # Extending max_steps on resume: a constant schedule, since a decaying one is a function of max_steps.
    common = ("--save_steps", "2", "--num_completions_to_print", "2", "--lr_scheduler_type", "constant")
    assert run_main(seed_reference, out, *common, "--max_steps", "4") == 0
    assert (out / "checkpoint-4").is_dir() and (out / "checkpoint-2").is_dir()
    capsys.readouterr()
    assert (
        run_main(seed_reference, out, *common, *"--max_steps 6 --resume_from_checkpoint latest".split()) == 0
    )
    printed = capsys.readouterr().out
    assert f"resumed from {out / 'checkpoint-4'} at step 4" in printed
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[-1]["num_completions"] == 6 * 32
    assert [c["step"] for c in read_jsonl(out / "completions.jsonl")] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]

    # Exact resume: the same numbers as an uninterrupted 6-step run (timings aside), and the same weights.
    assert run_main(seed_reference, straight, *common, "--max_steps", "6") == 0

    def strip(r):
        return {k: v for k, v in r.items() if not k.startswith(TIMING_PREFIXES)}

    assert [strip(r) for r in rows] == [strip(r) for r in metric_rows(straight)]
    a = load_file(str(out / "final" / "model.safetensors"))
    b = load_file(str(straight / "final" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# ================================================================================================ tabular oracle
# The seed demo's GRPO step (000: demo.py, see tests/test_bandit.py), transcribed with its own building blocks
# (Categorical.log_prob, torch.clamp / torch.min, kl_divergence) and nothing from tinygrpo.

CLIP_EPS = 0.2
KL_BETA = 0.02


def _seed_grpo_loss(table, q, answers, adv, ref_table, old_table=None):
    dist = Categorical(logits=table[q])
    new_lp = dist.log_prob(answers)
    old_lp = (
        Categorical(logits=old_table[q]).log_prob(answers) if old_table is not None else new_lp
    ).detach()
    ratio = torch.exp(new_lp - old_lp)
    surr1 = ratio * adv
    surr2 = torch.clamp(ratio, 1.0 - CLIP_EPS, 1.0 + CLIP_EPS) * adv
    clip_loss = -torch.min(surr1, surr2).mean()
    ref = Categorical(logits=ref_table[q])
    kl = torch.distributions.kl.kl_divergence(dist, ref)
    return clip_loss + KL_BETA * kl, ratio.detach()


def _oracle_loss(
    table, q, answers, adv, ref_table, old_table, *, T, eps_high, delta, kl, bias_correction=True
):
    """The demo's GRPO loss with each option written out (temperature, asymmetric clip, TRL's delta, the KL
    estimator, TRL's use_bias_correction_kl: a sampled estimator's value times the ratio, gradient included), again
    with torch's distributions only."""
    dist = Categorical(logits=table[q] / T)
    new_lp = dist.log_prob(answers)
    old_lp = Categorical(logits=old_table[q] / T).log_prob(answers).detach()
    ratio = torch.exp(new_lp - old_lp)
    surr1 = (ratio if delta is None else torch.clamp(ratio, max=delta)) * adv
    surr2 = torch.clamp(ratio, 1.0 - CLIP_EPS, 1.0 + (eps_high or CLIP_EPS)) * adv
    clip_loss = -torch.min(surr1, surr2).mean()
    ref = Categorical(logits=ref_table[q] / T)
    log_r = ref.log_prob(answers) - new_lp  # per sampled answer
    per_sample = {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": torch.exp(log_r) - log_r - 1}
    if kl == "full":
        kl = torch.distributions.kl.kl_divergence(dist, ref)
    else:
        kl = (per_sample[kl] * (ratio if bias_correction else 1.0)).mean()
    return clip_loss + KL_BETA * kl


def _moved(table, q, answers, adv):
    """Row q moved to chosen ratios pi_new / pi_old: the right answer 1.3 (A > 0: clipped at 1.2), one wrong answer
    0.5 (A < 0: clipped at 0.8), another wrong one 1.4 (A < 0: NOT clipped, the min keeps r * A); the answers nobody
    sampled absorb the rest of the probability mass."""
    p_old = table[q].softmax(-1)
    gold = int(answers[adv > 0][0])
    wrong = [int(a) for a in answers.unique() if int(a) != gold]
    assert len(wrong) >= 2
    rho = torch.ones(N_ANS)
    rho[gold], rho[wrong[0]], rho[wrong[1]] = 1.3, 0.5, 1.4
    unsampled = torch.ones(N_ANS, dtype=torch.bool)
    unsampled[answers] = False
    rest = 1 - (p_old * rho)[~unsampled].sum()
    assert rest > 0
    rho[unsampled] = rest / p_old[unsampled].sum()
    moved = table.clone()
    moved[q] = p_old.log() + rho.log()
    return moved


def _tables():
    g = torch.Generator().manual_seed(1234)
    table = torch.randn(N_Q, N_ANS, generator=g)
    gold = torch.tensor([q // N_B + q % N_B for q in range(N_Q)])
    table[torch.arange(N_Q), gold] += 1.0  # the right answer is likely but not certain: groups with signal
    ref_table = table + 0.5 * torch.randn(N_Q, N_ANS, generator=g)  # != policy, so the KL has a gradient
    # float64: the trainer and the transcription are two orders of the same sums (tests/_numerics.py)
    return table.double(), ref_table.double()


def _table_trainer(tmp_path, loss_type, num_iterations=1, **options):
    tok = build_table_tokenizer()
    table, ref_table = _tables()
    settings = dict(
        output_dir=str(tmp_path / "table"),
        dataset_name="seed_bank",
        dataset_test_split=None,
        num_generations=8,
        per_device_train_batch_size=8,
        max_completion_length=1,
        reward_funcs=["accuracy_lenient"],
        beta=KL_BETA,
        kl_estimator="full",
        loss_type=loss_type,
        epsilon=CLIP_EPS,
        num_iterations=num_iterations,
        max_generations=1,
        disable_tqdm=True,
        make_plots=False,
        seed=5,
        dynamic_sampling=False,
        dtype="float64",
    )
    cfg = GRPOConfig(**{**settings, **options})
    trainer = GRPOTrainer(
        cfg,
        build_table_policy(tok, table),
        tok,
        load_split("seed_bank", "train"),
        ref_model=build_table_policy(tok, ref_table),
    )
    return trainer, table, ref_table


def _batch_with_signal(trainer):
    """A generated batch (one prompt, G = 8 one-token answers) whose rewards are not all equal, with the reference
    (and old) log-probs filled in as training_step does; plus the question, the answers and the advantages
    recomputed independently."""
    for _ in range(20):
        scored = trainer.generator.generate()
        if scored.batch.rewards.std() > 0:
            break
    else:
        pytest.fail("no group with reward variance in 20 batches")
    batch = scored.batch
    (mb,) = trainer.update.prepare(batch)  # the reference (and old) log-probs, as training_step computes them
    prompt = scored.first.prompts[0]
    a, b = (int(x) for x in prompt.rstrip("=").split("+"))
    q, gold = a * N_B + b, a + b
    assert trainer.tokenizer.decode(batch.prompt_ids[0]) == prompt
    answer_of = {trainer.tokenizer.convert_tokens_to_ids(a): int(a) for a in ANSWERS}
    assert batch.completion_ids.shape == (8, 1)
    answers = torch.tensor([answer_of[int(t)] for t in batch.completion_ids[:, 0]])
    r = (answers == gold).float()
    adv = (r - r.mean()) / (r.std() + 1e-4)  # TRL's z-score: unbiased std + 1e-4
    torch.testing.assert_close(batch.rewards, r)
    torch.testing.assert_close(batch.advantages, adv)
    return mb, q, answers, adv


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])  # all equal on 1-token completions
def test_table_policy_step_matches_seed_demo(tmp_path, loss_type):
    trainer, table, ref_table = _table_trainer(tmp_path, loss_type)
    mb, q, answers, adv = _batch_with_signal(trainer)
    model = trainer.model
    model.zero_grad(set_to_none=True)
    loss, stats = trainer.update.loss(mb)
    loss.backward()
    sums = dict(zip(stats.names, stats.sums, strict=True))

    oracle_table = table.clone().requires_grad_(True)
    oracle_loss, ratio = _seed_grpo_loss(oracle_table, q, answers, adv, ref_table)
    oracle_loss.backward()
    assert_same_math(loss, oracle_loss)
    assert_same_math(model.table.grad, oracle_table.grad)
    others = torch.arange(N_Q) != q
    assert model.table.grad[q].abs().sum() > 0 and not model.table.grad[others].any()  # only row q moves
    # the logged KL is the exact one
    kl = torch.distributions.kl.kl_divergence(Categorical(logits=table[q]), Categorical(logits=ref_table[q]))
    assert_same_math(sums["kl"] / sums["tokens"], kl)
    assert float(sums["ratio"]) == 8.0 and float(sums["clip_ratio/region"]) == 0.0


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_table_policy_clipped_second_pass_matches_seed_demo(tmp_path, loss_type):
    # num_iterations = 2: the old log-probs are taken before the policy moves; the table is then moved by hand so
    # that ratios land on both sides of [0.8, 1.2] with advantages of both signs, some clipped and some not.
    trainer, table, ref_table = _table_trainer(tmp_path, loss_type, num_iterations=2)
    mb, q, answers, adv = _batch_with_signal(trainer)
    assert mb.inputs.old_logps is not None
    assert_same_math(mb.inputs.old_logps[:, 0], Categorical(logits=table[q]).log_prob(answers))

    moved = _moved(table, q, answers, adv)
    model = trainer.model
    with torch.no_grad():
        model.table.copy_(moved)
    model.zero_grad(set_to_none=True)
    loss, stats = trainer.update.loss(mb)
    loss.backward()
    sums = dict(zip(stats.names, stats.sums, strict=True))

    oracle_table = moved.clone().requires_grad_(True)
    oracle_loss, ratio = _seed_grpo_loss(oracle_table, q, answers, adv, ref_table, old_table=table)
    oracle_loss.backward()
    outside = (ratio < 1 - CLIP_EPS) | (ratio > 1 + CLIP_EPS)
    assert (outside & (adv > 0)).any() and (outside & (adv < 0)).any()
    clipped = ((ratio > 1 + CLIP_EPS) & (adv > 0)) | ((ratio < 1 - CLIP_EPS) & (adv < 0))
    assert clipped.any()
    assert float(sums["clip_ratio/region"]) == float(clipped.sum())
    assert_same_math(loss, oracle_loss)
    assert_same_math(model.table.grad, oracle_table.grad)
    # and the clip matters: the unclipped surrogate is a different loss
    dist = Categorical(logits=moved[q])
    kl = torch.distributions.kl.kl_divergence(dist, Categorical(logits=ref_table[q]))
    assert abs(float(-(ratio * adv).mean() + KL_BETA * kl - loss.detach())) > 1e-3


@pytest.mark.parametrize(
    "T, eps_high, delta, kl, bias",
    [
        (1.5, None, None, "k3", True),
        (1.0, 0.35, 1.38, "k1", True),
        (0.7, None, 1.25, "k2", False),
        (1.3, 0.25, None, "full", True),
        (1.0, None, None, "k3", False),
    ],
)
def test_table_policy_step_matches_the_transcription_for_every_option(tmp_path, T, eps_high, delta, kl, bias):
    # Each option reaches the loss as its formula says: the second pass of num_iterations 2 on a table moved as in
    # the test above, against _oracle_loss.
    options = dict(
        temperature=T, epsilon_high=eps_high, delta=delta, kl_estimator=kl, use_bias_correction_kl=bias
    )
    trainer, table, ref_table = _table_trainer(tmp_path, "dapo", num_iterations=2, **options)
    mb, q, answers, adv = _batch_with_signal(trainer)
    moved = _moved(table, q, answers, adv)
    with torch.no_grad():
        trainer.model.table.copy_(moved)
    trainer.model.zero_grad(set_to_none=True)
    loss, stats = trainer.update.loss(mb)
    loss.backward()
    sums = dict(zip(stats.names, stats.sums, strict=True))
    entropy = Categorical(logits=moved[q] / T).entropy()  # the logged entropy is the sampling distribution's
    assert_same_math(sums["entropy"] / sums["tokens"], entropy)
    oracle_table = moved.clone().requires_grad_(True)
    oracle = _oracle_loss(
        oracle_table,
        q,
        answers,
        adv,
        ref_table,
        table,
        T=T,
        eps_high=eps_high,
        delta=delta,
        kl=kl,
        bias_correction=bias,
    )
    oracle.backward()
    assert_same_math(loss, oracle)
    assert_same_math(trainer.model.table.grad, oracle_table.grad)
    # and every option set here changes the loss: dropping any one of them gives another value
    plain = dict(T=T, eps_high=eps_high, delta=delta, kl=kl, bias_correction=bias)
    for name, off in (
        ("T", 1.0),
        ("eps_high", None),
        ("delta", None),
        ("kl", "full"),
        ("bias_correction", False),
    ):
        if name == "bias_correction" and kl == "full":
            continue  # not applied to the exact KL
        if plain[name] != off:
            other = _oracle_loss(moved, q, answers, adv, ref_table, table, **{**plain, name: off})
            assert abs(other.item() - oracle.item()) > 1e-5, name


def test_dynamic_sampling_trains_only_on_groups_with_signal(seed_reference, tmp_path):
    # DAPO's dynamic sampling: every group kept for the update has reward variance; refills come from fresh prompts
    # (the cursor moves past one batch) and rounds of different completion widths concatenate.
    tr = reference_trainer(
        seed_reference, tmp_path, dynamic_sampling=True, max_dynamic_sampling_rounds=3, temperature=1.5
    )
    G = tr.cfg.num_generations
    per_step = tr.cfg.per_device_train_batch_size // G
    scored = tr.generator.generate()
    batch = scored.batch
    rewards = batch.rewards.view(-1, G)
    assert rewards.std(1).gt(0).all(), "a zero-variance group was kept"
    assert batch.prompt_ids.size(0) <= per_step
    assert batch.completion_ids.shape == batch.completion_mask.shape
    rounds = scored.refill_rounds
    assert tr.prompts.cursor == per_step * (rounds + 1)
    assert scored.num_sampled == per_step * G * (rounds + 1)
    # the mask still ends at the first EOS on every kept row
    for row, m in zip(batch.completion_ids, batch.completion_mask, strict=True):
        n = int(m.sum())
        assert n >= 1 and (n == row.numel() or row[n - 1] == tr.tokenizer.eos_token_id)
    (mb,) = tr.update.prepare(batch)
    loss, _ = tr.update.loss(mb)
    assert torch.isfinite(loss)


def test_dynamic_sampling_off_keeps_the_whole_batch(seed_reference, tmp_path):
    tr = reference_trainer(seed_reference, tmp_path, dynamic_sampling=False)
    scored = tr.generator.generate()
    assert scored.batch.num_groups == tr.cfg.per_device_train_batch_size // tr.cfg.num_generations
    assert scored.refill_rounds is None


@pytest.mark.parametrize("dynamic_sampling", [True, False])
def test_no_signal_means_no_update(seed_reference, tmp_path, dynamic_sampling):
    # A constant reward leaves every group with zero variance: nothing to learn, so the weights must not move
    # (a zero-gradient AdamW step would still move them through its momentum), with or without refills.
    (tmp_path / "const.py").write_text("def const(completions, **kw):\n    return [1.0] * len(completions)\n")
    out = tmp_path / "run"
    assert (
        run_main(
            seed_reference,
            out,
            "--reward_funcs",
            f"{tmp_path / 'const.py'}:const",
            "--max_steps",
            "3",
            "--dynamic_sampling",
            str(dynamic_sampling).lower(),
            "--save_steps",
            "0",
        )
        == 0
    )
    before = load_file(str(Path(seed_reference) / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before)
    rows = [r for r in metric_rows(out) if r["step"] > 0]
    assert rows and all(r["skipped_updates"] == 1 and r["frac_reward_zero_std"] == 1.0 for r in rows)


def test_pass_at_k_with_near_zero_temperature_equals_greedy_accuracy(seed_reference):
    # At temperature -> 0 every sample is the greedy answer, so pass@k must equal greedy accuracy; at temperature 1
    # pass@k can only be as good as "any of k", which is in [0, 1].
    from rewards import accuracy
    from tinygrpo.rollout.evaluation import held_out_metrics

    model, tok = load_model_and_tokenizer(seed_reference, "model_name_or_path")
    rows = load_split("seed_bank", "train").to_dict()
    enc = tok(rows["prompt"], padding=True, return_tensors="pt")
    batch = (model, tok, enc["input_ids"], enc["attention_mask"], rows)

    def evaluate(pass_k: int, temperature: float) -> dict[str, float]:
        params = SamplingParams(3, temperature)
        held = held_out_metrics(*batch, params, torch.Generator().manual_seed(0), pass_k=pass_k)
        # The greedy completions come back with the metrics computed from them.
        right = accuracy(completions=held.completions, answer=rows["answer"])
        assert held.metrics["eval/accuracy"] == sum(right) / len(right)
        return held.metrics

    cold = evaluate(3, 1e-4)
    assert cold["eval/pass@3"] == cold["eval/accuracy"]
    warm = evaluate(8, 1.0)
    assert warm["eval/accuracy"] == cold["eval/accuracy"]  # greedy does not depend on the sampling settings
    assert 0.0 <= warm["eval/pass@8"] <= 1.0
    # pass@k without its own generator would draw from torch's global one, the training RNG: refused.
    with pytest.raises(ValueError, match="generator"):
        held_out_metrics(*batch, SamplingParams(3), pass_k=2)


@pytest.mark.slow
def test_grouped_fast_path_trains_like_the_generic_forward(seed_reference, tmp_path):
    """grouped_forward on and off: the same completions, rewards and (to float64 rounding: two orders of the same
    sums, tests/_numerics.py) losses and weights after three steps with beta > 0 (the reference forward runs too)
    and num_iterations 2 (old log-probs too)."""
    outs = {}
    for grouped in ("true", "false"):
        out = tmp_path / grouped
        flags = "--max_generations 3 --beta 0.04 --num_iterations 2 --dtype float64 --grouped_forward".split()
        assert run_main(seed_reference, out, *flags, grouped) == 0
        outs[grouped] = out
    a, b = (metric_rows(outs[g]) for g in ("true", "false"))
    assert [r["reward"] for r in a] == [r["reward"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        for k in ("loss", "kl", "grad_norm", "clip_ratio/region"):
            assert ra[k] == same_math(rb[k]), k
    ca, cb = (read_jsonl(outs[g] / "completions.jsonl") for g in ("true", "false"))
    assert [c["completion"] for c in ca] == [c["completion"] for c in cb]
    wa, wb = (load_file(str(outs[g] / "final" / "model.safetensors")) for g in ("true", "false"))
    assert wa.keys() == wb.keys()
    for k in wa:
        # (The key bias's true gradient is 0, softmax ignores it: AdamW turns the rounding noise left in its place
        # into steps of either sign. In float64 that noise is ~1e-18 against AdamW's eps 1e-8: still invisible.)
        assert_same_math(wa[k], wb[k], msg=k)


# ================================================================================================ pinned invariants
# Each of these caught a one-line mutation of the update that the rest of the suite let through.


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_skipping_zero_advantage_groups_is_exact(seed_reference, tmp_path, loss_type):
    # With beta == 0 a group whose advantages are all 0 adds exactly 0 to the loss and its gradient, so leaving it
    # out of the forward/backward must not change either: the loss of the active groups is rescaled to the whole
    # mini-batch (its rows, or its tokens for bnpo). Two mini-batches, so that the rescale is per mini-batch.
    runs = {}
    for skip in ("true", "false"):
        out = tmp_path / skip
        assert (
            run_main(
                seed_reference,
                out,
                "--loss_type",
                loss_type,
                "--skip_zero_advantage_groups",
                skip,
                *"--num_mini_batches 2 --max_generations 2 --dtype float64".split(),  # two orders: float64
            )
            == 0
        )
        runs[skip] = metric_rows(out)
    on, off = runs["true"], runs["false"]
    assert 0 < on[0]["frac_reward_zero_std"] < 1  # some groups are skipped, some are not
    for a, b in zip(on, off, strict=True):
        assert a["reward"] == b["reward"]  # the same samples
        # (per-token statistics such as entropy cover the forwarded tokens only)
        for k in ("loss", "grad_norm"):
            assert a[k] == same_math(b[k]), k


@pytest.mark.slow
def test_mask_truncated_completions_leaves_truncated_rows_out_of_the_gradient(seed_reference, tmp_path):
    # One-token completions: "<eos>" (finished) or a character (truncated). The reward is None for finished rows
    # (advantage exactly 0) and varies among truncated ones, so every bit of signal sits on truncated rows. With
    # mask_truncated_completions those rows are masked: the gradient is exactly 0 and the weights do not move.
    # Without it they train.
    (tmp_path / "trunc.py").write_text(
        "def parity(completions, **kw):\n"
        "    return [None if c.endswith('<eos>') else float(sum(map(ord, c)) % 2) for c in completions]\n"
    )
    grads = {}
    for masked in ("true", "false"):
        out = tmp_path / masked
        assert (
            run_main(
                seed_reference,
                out,
                "--reward_funcs",
                f"{tmp_path / 'trunc.py'}:parity",
                "--max_completion_length",
                "1",
                "--mask_truncated_completions",
                masked,
                *"--max_steps 1 --temperature 2.0".split(),
            )
            == 0
        )
        (row,) = metric_rows(out)
        assert row["frac_reward_zero_std"] < 1  # some groups carry signal
        grads[masked] = row["grad_norm"]
        before = load_file(str(Path(seed_reference) / "model.safetensors"))
        after = load_file(str(out / "final" / "model.safetensors"))
        moved = [k for k in before if not torch.equal(before[k], after[k])]
        assert (moved == []) == (masked == "true"), moved
    assert grads["true"] == 0.0 and grads["false"] > 0


# The first half of the global batch's rows alternate, the rest score 0 (no signal): on two processes the first
# holds every group with signal and the second trains on nothing (its forward runs at weight 0 for DDP).
FIRST_HALF = (
    "import os\n"
    "def first_half(completions, **kw):\n"
    "    mine = os.environ.get('RANK', '0') == '0' if os.environ.get('WORLD_SIZE', '1') != '1' else None\n"
    "    n = len(completions)\n"
    "    return [float(i % 2) if (mine if mine is not None else i < n // 2) else 0.0 for i in range(n)]\n"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--top_entropy_quantile", "0.5"],
        ["--reward_funcs", "FIRST_HALF", "--beta", "0", "--explore_rounds", "0"],
        # a screen of 2 samples, then 2 more of every prompt whose screen differs: every group of 4 again (the
        # alternating reward differs in every screen), sampled in two passes and gathered from rows that may differ
        ["--sample_allocation", "screen", "--allocation_unit", "2"],
    ],
    ids=["plain", "top_entropy", "uneven_signal", "screen"],
)
def test_two_processes_take_the_same_first_step_as_one(seed_reference, tmp_path, extra):
    # The same global batch on 1 and on 2 processes gives the same gradient. Greedy sampling (top_k 1) makes the
    # completions independent of each process's generator; a reward that alternates with the row index, taken as
    # the advantage (advantage_mode reinforce: identical completions with centred advantages would cancel), gives
    # every group the same non-zero signal. DDP averages gradients over processes, so the dapo normaliser must be
    # the global token count divided by the number of processes: without the division the gradient halves. With
    # top_entropy_quantile the entropy threshold is a quantile of every process's tokens (gathered), as on one.
    (tmp_path / "alt.py").write_text(
        "def alternate(completions, **kw):\n    return [float(i % 2) for i in range(len(completions))]\n"
        + FIRST_HALF
    )
    extra = [f"{tmp_path / 'alt.py'}:first_half" if x == "FIRST_HALF" else x for x in extra]
    uneven = any("first_half" in x for x in extra)
    common = [
        "--model_name_or_path",
        seed_reference,
        *"--dataset_name seed_bank --dataset_test_split".split(),
        "",
        *"--num_generations 4 --max_completion_length 3 --max_steps 1 --logging_steps 1 --save_steps 0".split(),
        *"--disable_tqdm true --make_plots false --dynamic_sampling false --top_k 1 --reward_funcs".split(),
        f"{tmp_path / 'alt.py'}:alternate",
        *"--loss_type dapo --advantage_mode reinforce --torch_num_threads 1".split(),
        *"--dtype float64".split(),  # one process and two sum in different orders (tests/_numerics.py)
        *extra,
    ]
    one = tmp_path / "one"
    assert train_grpo.main([*common, "--per_device_train_batch_size", "32", "--output_dir", str(one)]) == 0
    two = tmp_path / "two"
    proc = launch_two([*common, "--per_device_train_batch_size", "16", "--output_dir", str(two)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (a,), (b,) = metric_rows(one), metric_rows(two)
    assert a["reward"] == b["reward"] == (0.25 if uneven else 0.5)
    assert a["trained_completions"] == b["trained_completions"] == 32
    assert a["completions/mean_length"] == b["completions/mean_length"]
    assert a["grad_norm"] > 1e-3
    for k in ("grad_norm", "loss", "entropy"):
        assert b[k] == same_math(a[k]), k


# ================================================================================================ launching, outputs


@pytest.mark.slow
@pytest.mark.parametrize("cpu", [True, False])
def test_accelerate_launch_with_two_processes_that_starts_one_refuses(seed_reference, tmp_path, cpu):
    # accelerate's plain launcher (CPU, no mpirun) starts ONE process for --num_processes 2 and says nothing.
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--quiet", *(["--cpu"] if cpu else [])]
    cmd += [
        *"--num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no".split(),
        "train_grpo.py",
    ]
    cmd += ["--model_name_or_path", seed_reference, "--dataset_name", "seed_bank", "--output_dir", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: accelerate launch asked for 2 processes but started 1 (its plain launcher starts one unless mpirun "
        "is installed); on CPU launch with `accelerate launch --config_file configs/accelerate/cpu_2proc.yaml "
        "train_grpo.py`"
    ]
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.slow
def test_outputs_line_lists_only_what_was_written_and_plots_show_entropy_without_kl(
    seed_reference, tmp_path, capsys
):
    from tinygrpo.run.report.curves import plot_metrics

    out = tmp_path / "run"
    assert run_main(seed_reference, out, *"--make_plots false --make_report false".split()) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"outputs in {out}: metrics.jsonl, completions.jsonl, summary.json, config.json, final/"
    assert plot_metrics(out / "metrics.jsonl", tmp_path / "a.png")[2] == "entropy"  # beta 0: no KL is logged
    assert run_main(seed_reference, tmp_path / "kl", "--beta", "0.02", "--make_plots", "false") == 0
    assert plot_metrics(tmp_path / "kl" / "metrics.jsonl", tmp_path / "b.png")[2] == "kl"


# ================================================================================================ steps without signal


def _constant_reward_trainer(seed_reference, tmp_path, reward, **overrides) -> GRPOTrainer:
    kw = dict(per_device_train_batch_size=16, beta=0.04, dynamic_sampling=True)
    return reference_trainer(seed_reference, tmp_path, reward_funcs=[reward], **{**kw, **overrides})


def test_a_step_that_finds_no_group_with_signal_trains_nothing_not_even_the_kl(seed_reference, tmp_path):
    # Every reward is equal, so dynamic sampling finds no group with signal in any round: the step keeps one group
    # marked no_signal (every process must run a forward under DDP) and trains nothing on it, not even the KL term,
    # although the policy has moved away from the reference (so the KL alone would have a gradient).
    def same(completions, **kw):
        return [1.0] * len(completions)

    trainer = _constant_reward_trainer(seed_reference, tmp_path, same)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    for _ in range(2):
        out = trainer.training_step()
        assert out.scored.batch.no_signal
        assert out.metrics["trained_completions"] == 0
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_rewards_that_stop_applying_later_in_a_run_are_steps_without_signal(seed_reference, tmp_path):
    # Only a run on which no reward has ever applied is an error; later, a batch whose rewards are all None is a
    # batch without signal, like one whose rewards are all equal: its advantages are 0 and the step goes on.
    applies = [True]

    def sometimes(completions, **kw):
        return [float(i % 2) if applies[0] else None for i in range(len(completions))]

    trainer = _constant_reward_trainer(seed_reference, tmp_path, sometimes, dynamic_sampling=False)
    first = trainer.training_step()
    assert first.scored.batch.advantages.ne(0).any()
    applies[0] = False
    second = trainer.training_step()
    assert torch.isnan(second.scored.batch.rewards).all()
    assert second.scored.batch.advantages.eq(0).all()
    assert trainer.step == 2 and math.isfinite(second.metrics["loss"])
