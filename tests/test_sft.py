"""tinygrpo.sft.train and train_sft.py: the SFT recipe for the reference policy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _numerics import same_math
from transformers import AutoModelForCausalLM, AutoTokenizer

import tiny_lm  # noqa: F401 - registers the model with the Auto classes
from tiny_lm import build_tokenizer
from tinygrpo.data.problems import load_split
from tinygrpo.data.tasks.seed_bank import build_seed_bank
from tinygrpo.sft.train import SFTConfig, encode_examples, train_reference

REPO = Path(__file__).resolve().parent.parent
CHANCE = 1 / 13  # the seed bank's answers are one of the 11 sums 0..10; ~1/13 allows for format errors


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft")
    cfg = SFTConfig(
        output_dir=str(out),
        dataset_name="seed_bank",
        dataset_test_split="train",
        allow_overlapping_splits=True,  # (the seed bank's one split: judged on what it trains on, on purpose)
        max_steps=150,
        per_device_train_batch_size=32,
        logging_steps=0,
        seed=0,
    )
    return out, train_reference(cfg, verbose=False)


def test_sft_learns(sft_run):
    _, summary = sft_run
    assert summary["train_problems"] == 36 and summary["steps"] == 150
    # Initial loss is ~ln(14) = 2.64 for a near-uniform model; 150 steps on 36 problems should go far below it.
    assert summary["first_loss"] > 2.0
    assert summary["final_loss"] < 0.5 * summary["first_loss"]
    # 5 seeds reached >= 92% at 120 steps when this test was written; 0.5 leaves a wide margin and is far above chance.
    assert summary["eval_accuracy"] > max(0.5, 5 * CHANCE)
    assert 0.1e6 <= summary["parameters"] <= 1e6


def test_sft_saves_loadable_model(sft_run):
    out, summary = sft_run
    assert (out / "model.safetensors").is_file()
    assert json.loads((out / "sft_summary.json").read_text()) == summary
    assert json.loads((out / "sft_config.json").read_text())["max_steps"] == 150
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.padding_side == "left"
    # Independent accuracy with generate() (not the code's greedy_answers): must equal the summary's.
    rows = build_seed_bank()["train"]
    enc = tok([r["prompt"] for r in rows], padding=True, return_tensors="pt")
    gen = model.generate(**enc, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    outs = tok.batch_decode(gen[:, enc["input_ids"].size(1) :], skip_special_tokens=False)
    correct = sum(
        o.replace("<pad>", "").startswith(r["answer"] + "<eos>") for o, r in zip(outs, rows, strict=True)
    )
    assert correct / len(rows) == pytest.approx(summary["eval_accuracy"])


def test_encode_examples_labels_only_answer_and_eos():
    tok = build_tokenizer()
    prompts = ["3+4=", "37+48=", "99+99=", "0+0="]
    answers = ["7", "85", "198", "0"]
    ids, mask, labels = encode_examples(tok, prompts, answers)
    T = max(len(p) + len(a) + 1 for p, a in zip(prompts, answers, strict=True))
    assert ids.shape == mask.shape == labels.shape == (4, T)
    for i, (p, a) in enumerate(zip(prompts, answers, strict=True)):
        n = len(p) + len(a) + 1
        assert mask[i].tolist() == [0] * (T - n) + [1] * n  # left padded
        assert tok.decode(ids[i, T - n :]) == p + a + "<eos>"
        want = [-100] * (T - len(a) - 1) + [tok.convert_tokens_to_ids(c) for c in a] + [tok.eos_token_id]
        assert labels[i].tolist() == want


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_steps", 0),  # no training at all
        ("train_size", -1),  # negative sample size
        ("per_device_train_batch_size", 0),  # empty batches
        ("n_positions", 0),  # no context
        ("learning_rate", 0.0),  # a learning rate of zero never moves
        ("learning_rate", -1e-3),  # negative: gradient ascent
    ],
)
def test_sft_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        SFTConfig(**{field: value})


def test_sft_config_accepts_train_size_zero():
    assert SFTConfig(train_size=0).train_size == 0  # 0 means "all of the split"


def test_sft_rejects_too_short_context(tmp_path):
    # "99+99=198<eos>" is 10 tokens; a context of 8 cannot hold it, and the run must say so before training.
    cfg = SFTConfig(output_dir=str(tmp_path), n_positions=8, max_steps=1, logging_steps=0, train_size=50)
    with pytest.raises(ValueError, match="n_positions"):
        train_reference(cfg, verbose=False)
    assert not (tmp_path / "model.safetensors").exists()


@pytest.mark.slow
def test_cli_rejects_bad_value():
    r = subprocess.run(
        [sys.executable, "train_sft.py", "--max_steps", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "max_steps" in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_help_lists_the_options():
    r = subprocess.run(
        [sys.executable, "train_sft.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "--lr_scheduler_type" in r.stdout and "--train_size" in r.stdout


def test_encode_examples_match_model_loss():
    # The SFT loss on encoded examples equals cross entropy on the answer+<eos> tokens only, computed by hand.
    tok = build_tokenizer()
    torch.manual_seed(0)
    # float64: the model's loss and the hand-written one are two orders of the same sums (tests/_numerics.py)
    model = tiny_lm.TinyLMForCausalLM(tiny_lm.TinyLMConfig(initializer_range=0.3)).eval().double()
    prompts, answers = ["3+4=", "37+48="], ["7", "85"]
    ids, mask, labels = encode_examples(tok, prompts, answers)
    with torch.no_grad():
        loss = model(ids, attention_mask=mask, labels=labels).loss.item()
        nll = []
        for p, a in zip(prompts, answers, strict=True):
            x = tok(p + a + "<eos>", return_tensors="pt")["input_ids"]
            logp = torch.log_softmax(model(x).logits[0], -1)
            for t in range(len(p), x.size(1)):  # positions of the answer characters and <eos>
                nll.append(-float(logp[t - 1, x[0, t]]))
    assert loss == same_math(sum(nll) / len(nll))


def test_sft_never_overwrites_a_model_unless_asked(sft_run, tmp_path):
    out, _ = sft_run
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    cfg = SFTConfig(
        output_dir=str(out),
        dataset_name="seed_bank",
        dataset_test_split="",
        max_steps=2,
        per_device_train_batch_size=8,
        logging_steps=0,
    )
    with pytest.raises(ValueError, match="already holds a model; pass --overwrite_output_dir true"):
        train_reference(cfg, verbose=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    cfg = SFTConfig(
        output_dir=str(copy),
        dataset_name="seed_bank",
        dataset_test_split="",
        max_steps=2,
        per_device_train_batch_size=8,
        logging_steps=0,
        overwrite_output_dir=True,
    )
    train_reference(cfg, verbose=False)
    assert (copy / "model.safetensors").read_bytes() != before["model.safetensors"]


@pytest.mark.parametrize("case", ["is", "symlink", "inside"])
def test_sft_never_writes_where_it_reads_its_dataset(tmp_path, capsys, case):
    # issue 30, class 1: one line naming both paths, exit 1, nothing written (output_dir is the dataset directory,
    # a symlink to it, or holds it).
    import train_sft

    ds = tmp_path / "out" / "ds" if case == "inside" else tmp_path / "ds"
    ds.mkdir(parents=True)
    (ds / "train.jsonl").write_text(json.dumps({"prompt": "1+2=", "answer": "3"}) + "\n")
    out = {"is": ds, "symlink": tmp_path / "link", "inside": tmp_path / "out"}[case]
    if case == "symlink":
        out.symlink_to(ds, target_is_directory=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert train_sft.main(["--output_dir", str(out), "--dataset_name", str(ds), "--max_steps", "1"]) == 1
    real = os.path.realpath(ds)
    expected = {
        "is": f"output_dir {out} is dataset {ds}",
        "symlink": f"output_dir {out} is dataset {ds} (both are {real})",
        "inside": f"dataset {ds} is inside output_dir {out}",
    }[case]
    rule = ": a run never writes where it reads; choose another --output_dir"
    assert capsys.readouterr().err.splitlines() == [f"error: {expected}{rule}"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
def test_sft_refuses_what_grpo_refuses_before_training(tmp_path):
    """One set of start-up checks: a held-out split made of rows trained on, and a verifier that scores every gold
    answer 0, are refused by SFT as by GRPO (tinygrpo/run/validation.py check_held_out), naming the option."""
    common = dict(output_dir=str(tmp_path / "ref"), max_steps=1, logging_steps=0, train_size=0)
    with pytest.raises(
        ValueError, match="share 36 of the 36 held-out prompts.*--allow_overlapping_splits true"
    ):
        train_reference(
            SFTConfig(dataset_name="seed_bank", dataset_test_split="train", **common), verbose=False
        )
    # a task's verifier on data whose gold completions it scores 0: multiplication_scratchpad's judges its worked
    # column, here addition's answers turned around and cut by an "x" (no worked answer)
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        rows = load_split("addition", split).to_dict()
        lines = [
            json.dumps({"prompt": p, "answer": a, "worked": a[::-1] + "x"})
            for p, a in zip(rows["prompt"], rows["answer"], strict=True)
        ][:50]
        (data / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    cfg = SFTConfig(
        dataset_name=str(data), task="multiplication_scratchpad", dataset_test_split="test", **common
    )
    with pytest.raises(ValueError, match="scores the gold worked .* not 1.0"):
        train_reference(cfg, verbose=False)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_sft.py", "train_grpo.py"])
def test_an_empty_task_is_one_line_not_the_default_task(script, tmp_path):
    r = subprocess.run(
        [sys.executable, script, "--task", "", "--output_dir", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "error: --task is empty: name a task (a built-in name, a file, module:NAME) or leave the flag out"
    ], r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_users_kernel_setting_replaced_for_the_portable_reference_is_said(tmp_path):
    """kernels=portable trains in a process on PORTABLE's kernels: a user's own ATEN_CPU_CAPABILITY is replaced
    there, and the script says so in one line naming it (and what keeps it); a setting equal to PORTABLE's is not
    a replacement and says nothing."""
    from tinygrpo.sft.train import PORTABLE

    lines = {}
    for name, value in (("mine", "avx2"), ("same", PORTABLE["ATEN_CPU_CAPABILITY"])):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": value}
        cmd = [sys.executable, "train_sft.py", "--output_dir", str(tmp_path / name), "--max_steps", "1"]
        done = subprocess.run(
            [*cmd, "--dataset_test_split", ""], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        lines[name] = [line for line in done.stderr.splitlines() if line.startswith("kernels=portable:")]
    assert lines["mine"] == [
        "kernels=portable: ATEN_CPU_CAPABILITY=avx2 from the environment is replaced for the reference's training "
        "(tinygrpo.sft.train.PORTABLE); --kernels native keeps it"
    ]
    assert lines["same"] == []
