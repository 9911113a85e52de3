"""A Hugging Face model of the user's own, not tiny_lm: a small random GPT-2 with a byte-level BPE tokenizer trained
here with `tokenizers` (no download), whose end-of-sequence text is "<|endoftext|>", not tiny_lm's "<eos>". The
trainer hands rewards and the held-out verifier that tokenizer's EOS text, the start-up check refuses a reward that
looks for another, and GRPO runs on the model end to end."""

from __future__ import annotations

import json
import math

import pytest
import torch
from _runs import run_inproc
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from tinygrpo.data.problems import load_split
from tinygrpo.rollout.scoring import Scorer
from tinygrpo.run.config import GRPOConfig
from tinygrpo.run.launch import load_model_and_tokenizer
from tinygrpo.run.trainer import GRPOTrainer

EOS_TEXT = "<|endoftext|>"


@pytest.fixture(scope="module")
def own_model(tmp_path_factory):
    """A directory holding a random GPT2LMHeadModel and a BPE tokenizer trained on the seed bank's text, saved as a
    user's model would be (safetensors, tokenizer.json)."""
    train = load_split("seed_bank", "train")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    texts = [r["prompt"] + str(r["answer"]) for r in train]
    specials = ["<|pad|>", EOS_TEXT]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    bpe.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=300, special_tokens=specials, initial_alphabet=alphabet)
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=EOS_TEXT, pad_token="<|pad|>", padding_side="left"
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tok), n_positions=32, n_embd=32, n_layer=2, n_head=2,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    out = tmp_path_factory.mktemp("own") / "gpt2"
    GPT2LMHeadModel(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _trainer(path, tmp_path, **overrides) -> GRPOTrainer:
    model, tok = load_model_and_tokenizer(str(path), "model_name_or_path")
    kw = dict(
        output_dir=str(tmp_path / "t"), dataset_name="seed_bank", dataset_test_split=None, num_generations=4
    )
    kw |= dict(per_device_train_batch_size=16, max_completion_length=4, disable_tqdm=True, make_plots=False)
    return GRPOTrainer(GRPOConfig(**{**kw, **overrides}), model, tok, load_split("seed_bank", "train"))


def test_the_trainers_scoring_reads_the_tokenizers_eos(own_model, tmp_path):
    """A gold answer followed by the tokenizer's EOS id scores 1.0 under the trainer's own scoring (decoded, then
    every reward with the trainer's keywords), the same answer cut before EOS 0.0, and the held-out verifier agrees."""
    trainer = _trainer(own_model, tmp_path)
    tok = trainer.tokenizer
    assert tok.eos_token == EOS_TEXT and trainer.rewards.kwargs["eos"] == EOS_TEXT
    answers = [str(a) for a in trainer.prompts.columns["answer"][:3]]
    rows = [tok(a)["input_ids"] + [tok.eos_token_id] for a in answers]
    rows += [tok(a)["input_ids"] for a in answers]  # (cut: no EOS)
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    lengths = torch.tensor([len(r) for r in rows])
    scorer = Scorer(trainer.rewards, tok, None)
    _, texts, _, total = scorer(trainer.prompts, [0, 1, 2, 0, 1, 2], ids, lengths, 1)
    assert texts[:3] == [a + EOS_TEXT for a in answers]
    assert total.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    verifier = trainer.evaluator.verifier
    rows3 = {"prompt": trainer.prompts.texts[:3], "answer": answers}
    assert verifier(texts[:3], rows3) == [True] * 3 and verifier(texts[3:], rows3) == [False] * 3


def fixed_eos_accuracy(completions, answer, **kwargs):
    """A reward that ignores the trainer's `eos` keyword and looks for tiny_lm's "<eos>"."""
    return [1.0 if c == f"{a}<eos>" else 0.0 for c, a in zip(completions, answer, strict=True)]


def test_a_reward_that_looks_for_another_eos_is_refused_at_start_up(own_model, tmp_path, capsys):
    """With this tokenizer, a reward that gives every gold answer 0 because it looks for "<eos>" is one error line
    that names both texts, before any step; the output directory gets no checkpoint."""
    rc = run_inproc(str(own_model), tmp_path / "o", "--reward_funcs", f"{__file__}:fixed_eos_accuracy")
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and err[0].startswith("error: "), err
    assert repr(EOS_TEXT) in err[0] and "fixed_eos_accuracy" in err[0] and "'<eos>'" in err[0]
    assert not list((tmp_path / "o").glob("checkpoint-*"))


def test_grpo_trains_the_own_model_end_to_end(own_model, tmp_path):
    """A few GRPO steps of train_grpo.py on the user's model: finite losses, weights that move, a held-out
    evaluation under the tokenizer's EOS. (The length penalty varies across a random model's samples, so the
    advantages are not all 0 even before any answer is right.)"""
    out = tmp_path / "run"
    flags = [
        "--max_steps",
        "3",
        "--reward_funcs",
        "accuracy",
        "length_penalty",
        "--max_completion_length",
        "4",
    ]
    assert run_inproc(str(own_model), out, *flags, "--learning_rate", "1e-2") == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) >= 1 and all(math.isfinite(x) for x in losses)
    before, after = load_file(own_model / "model.safetensors"), load_file(out / "final" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    summary = json.loads((out / "summary.json").read_text())
    assert "eval/accuracy" in summary["eval_after"]
