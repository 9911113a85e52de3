"""tiny_lm: the character tokenizer and the transformers-compatible GPT.

Every model test uses random weights with a fixed seed and a large `initializer_range`, so that logits differ
clearly between tokens and greedy decoding is not degenerate (with the default 0.02 init every prompt decodes to
the same token forever, which would hide ordering and caching bugs).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from _numerics import assert_same_math
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

import tiny_lm
from tiny_lm import EOS_TOKEN, PAD_TOKEN, TinyLMConfig, TinyLMForCausalLM, check_text
from tiny_lm.tokenization_tiny_lm import DEFAULT_CHARS


def make_model(seed: int = 0, **kw) -> TinyLMForCausalLM:
    torch.manual_seed(seed)
    cfg = dict(initializer_range=0.3)
    cfg.update(kw)
    return TinyLMForCausalLM(TinyLMConfig(**cfg)).eval()


# ---------------------------------------------------------------- tokenizer


def test_vocabulary_layout(tok):
    # <pad> = 0, <eos> = 1, then each character in order: the model config's pad/eos ids assume exactly this.
    assert tok.pad_token == PAD_TOKEN and tok.pad_token_id == 0
    assert tok.eos_token == EOS_TOKEN and tok.eos_token_id == 1
    assert len(tok) == 2 + len(DEFAULT_CHARS) == TinyLMConfig().vocab_size
    for i, ch in enumerate(DEFAULT_CHARS):
        assert tok.convert_tokens_to_ids(ch) == i + 2
    assert tok.padding_side == "left"


@pytest.mark.parametrize("ch", list(DEFAULT_CHARS))
def test_single_char_round_trip(tok, ch):
    # Every character of the vocabulary is one token and decodes back to itself.
    ids = tok(ch)["input_ids"]
    assert ids == [DEFAULT_CHARS.index(ch) + 2]
    assert tok.decode(ids) == ch


@pytest.mark.parametrize(
    "text",
    [
        "37+48=85<eos>",  # a full training string, <eos> included as one token
        "0+0=0<eos>",  # shortest problem
        "99+99=198<eos>",  # longest 2-digit problem (3-digit answer)
        "0123456789+=",  # every character once
        "1111",  # repeated characters are not merged into one token
        "<eos><eos>",  # special tokens back to back
    ],
)
def test_round_trip(tok, text):
    ids = tok(text)["input_ids"]
    # One id per character, the special token counting as one.
    n_eos = text.count(EOS_TOKEN)
    assert len(ids) == len(text) - n_eos * (len(EOS_TOKEN) - 1)
    assert ids.count(tok.eos_token_id) == n_eos
    assert tok.decode(ids) == text
    # Independent per-character mapping, built from the vocabulary order rather than from the tokenizer.
    expected, rest = [], text
    while rest:
        if rest.startswith(EOS_TOKEN):
            expected.append(1)
            rest = rest[len(EOS_TOKEN) :]
        else:
            expected.append(DEFAULT_CHARS.index(rest[0]) + 2)
            rest = rest[1:]
    assert ids == expected


def test_left_padding(tok):
    enc = tok(["1+2=", "37+48="], padding=True, return_tensors="pt")
    assert enc["input_ids"].tolist()[0][:2] == [0, 0]  # padding goes on the LEFT
    assert enc["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    assert tok.decode(enc["input_ids"][0], skip_special_tokens=True) == "1+2="


@pytest.mark.parametrize(
    "text, bad",
    [
        ("1+a=", "a"),  # a letter
        ("1 + 2", " "),  # a space is not in the vocabulary either
        ("3-1=", "-"),  # an operator the vocabulary lacks
        ("5×5=", "×"),  # non-ASCII
    ],
)
def test_unknown_character_raises(tok, text, bad):
    with pytest.raises(Exception):  # noqa: B017 - the Rust library raises a plain Exception
        tok(text)
    with pytest.raises(ValueError, match=repr(bad)):
        check_text(text, tok)


def test_check_text_accepts_known_text(tok):
    check_text("37+48=85<eos>", tok)  # <eos> is allowed, it is one token


def test_tokenizer_save_load(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.padding_side == "left"
    assert (loaded.pad_token_id, loaded.eos_token_id) == (0, 1)
    texts = ["1+2=3<eos>", "37+48=85<eos>"]
    a = tok(texts, padding=True)
    b = loaded(texts, padding=True)
    assert a["input_ids"] == b["input_ids"] and a["attention_mask"] == b["attention_mask"]
    with pytest.raises(Exception):  # noqa: B017 - still no silent <unk> after reload
        loaded("1+a")


# ---------------------------------------------------------------- model


def test_output_shapes(model64):
    ids = torch.randint(2, 14, (3, 7))
    out = model64(ids)
    assert out.logits.shape == (3, 7, 14)
    out2 = model64(ids, logits_to_keep=2)
    assert out2.logits.shape == (3, 2, 14)
    assert_same_math(out2.logits, out.logits[:, -2:])


def test_parameter_count_and_tied_embeddings():
    m = TinyLMForCausalLM(TinyLMConfig())
    n = sum(p.numel() for p in m.parameters())  # tied weights count once
    assert 100_000 <= n <= 1_000_000
    assert m.lm_head.weight is m.transformer.wte.weight
    # Independent count of the architecture: embeddings + per-layer (2 LN, attn, MLP) + final LN.
    V, P, C, L = 14, 32, 64, 2
    per_layer = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
    assert n == V * C + P * C + L * per_layer + 2 * C


def test_config_rejects_bad_heads():
    with pytest.raises(ValueError, match="n_head"):
        TinyLMConfig(n_embd=64, n_head=5)


def test_causality(model64):
    torch.manual_seed(1)
    ids = torch.randint(2, 14, (2, 10))
    t = 6
    ids2 = ids.clone()
    ids2[:, t] = (ids[:, t] - 2 + 1) % 12 + 2  # a different token at position t
    a, b = model64(ids).logits, model64(ids2).logits
    assert_same_math(a[:, :t], b[:, :t])
    assert (a[:, t:] - b[:, t:]).abs().amax() > 1e-3  # and the change does reach position t onwards


def test_left_padded_batch_matches_unpadded(model64, tok):
    model = model64
    texts = ["1+2=", "37+48=85", "9+9=18", "5"]  # different lengths: 4, 8, 6, 1
    enc = tok(texts, padding=True, return_tensors="pt")
    batch = model(**enc).logits
    T = enc["input_ids"].size(1)
    for i, text in enumerate(texts):
        ids = tok(text, return_tensors="pt")["input_ids"]
        single = model(ids).logits[0]
        n = ids.size(1)
        assert_same_math(batch[i, T - n :], single)
        assert torch.isfinite(batch[i]).all()  # padded queries must not produce NaN


def test_incremental_decoding_matches_full_forward(model64):
    model = model64
    torch.manual_seed(2)
    ids = torch.randint(2, 14, (2, 9))
    full = model(ids, use_cache=False).logits
    cache = DynamicCache()
    steps = []
    for t in range(ids.size(1)):
        out = model(ids[:, t : t + 1], cache=cache, use_cache=True)
        steps.append(out.logits)
    assert cache.get_seq_length() == ids.size(1)
    assert_same_math(torch.cat(steps, 1), full)


def test_incremental_decoding_left_padded(model64, tok):
    model = model64
    # Prompt in one go (left-padded), then one token at a time with a growing mask, as generate() does.
    texts = ["1+2=3<eos>", "37+48=85<eos>"]
    enc = tok(texts, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    full = model(ids, attention_mask=mask).logits
    k = 5
    cache = DynamicCache()
    parts = [model(ids[:, :k], attention_mask=mask[:, :k], cache=cache, use_cache=True).logits]
    for t in range(k, ids.size(1)):
        parts.append(model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache).logits)
    inc = torch.cat(parts, 1)
    real = mask.bool()
    assert_same_math(inc[real], full[real])


@pytest.mark.parametrize("seed", [0, 1])  # two random models: greedy paths differ
def test_generate_cache_equals_no_cache(tok, seed):
    m = make_model(seed)
    enc = tok(["1+2=", "37+48=", "5+55="], padding=True, return_tensors="pt")
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=1)
    with_cache = m.generate(**enc, use_cache=True, **kw)
    no_cache = m.generate(**enc, use_cache=False, **kw)
    assert torch.equal(with_cache, no_cache)
    # Independent greedy loop over each prompt alone (no padding, no cache) gives the same tokens.
    for i, text in enumerate(["1+2=", "37+48=", "5+55="]):
        ids = tok(text, return_tensors="pt")["input_ids"]
        done = False
        for _ in range(with_cache.size(1) - enc["input_ids"].size(1)):
            if done:
                ids = torch.cat([ids, torch.zeros(1, 1, dtype=torch.long)], 1)  # generate() pads after EOS
                continue
            nxt = m(ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
            done = int(nxt) == 1
        n_prompt = len(text)
        assert with_cache[i, enc["input_ids"].size(1) :].tolist() == ids[0, n_prompt:].tolist()


def test_generate_sampling_shape_and_eos(tok):
    m = make_model(3)
    enc = tok(["1+2=", "37+48="], padding=True, return_tensors="pt")
    # Use as EOS the token the model emits most often, so that most rows stop early.
    eos = int(m(**enc).logits[:, -1].argmax(-1)[0])
    torch.manual_seed(0)
    out = m.generate(
        **enc,
        do_sample=True,
        temperature=0.8,
        top_k=5,
        top_p=0.9,
        num_return_sequences=4,
        max_new_tokens=12,
        eos_token_id=eos,
        pad_token_id=0,
    )
    Tp = enc["input_ids"].size(1)
    assert out.size(0) == 2 * 4 and Tp < out.size(1) <= Tp + 12
    # Rows are grouped by prompt: each starts with its own prompt.
    for r in range(8):
        assert torch.equal(out[r, :Tp], enc["input_ids"][r // 4])
    gen = out[:, Tp:]
    n_stopped = 0
    for row in gen.tolist():
        if eos in row:
            n_stopped += 1
            assert all(t == 0 for t in row[row.index(eos) + 1 :])  # nothing but padding after EOS
        else:
            assert len(row) == 12  # a row without EOS ran the full budget
    assert n_stopped >= 1
    if n_stopped == 8:
        assert gen.size(1) < 12  # generation stops once every row has finished


def test_generate_top_k_1_is_greedy(tok, model):
    enc = tok(["1+2=", "37+48="], padding=True, return_tensors="pt")
    greedy = model.generate(**enc, do_sample=False, max_new_tokens=6, pad_token_id=0)
    sampled = model.generate(**enc, do_sample=True, top_k=1, max_new_tokens=6, pad_token_id=0)
    assert torch.equal(greedy, sampled)


def test_save_and_reload(model, tmp_path):
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, TinyLMForCausalLM)
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    torch.testing.assert_close(loaded.lm_head.weight, model.lm_head.weight, atol=0, rtol=0)
    ids = torch.randint(2, 14, (2, 8))
    assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert loaded.config.to_dict()["model_type"] == tiny_lm.TinyLMConfig.model_type
    # the backbone alone, as AutoModel loads any transformers checkpoint: the causal LM's hidden states
    backbone = AutoModel.from_pretrained(tmp_path).eval()
    assert isinstance(backbone, tiny_lm.TinyLMModel)
    hidden = backbone(ids).last_hidden_state
    assert torch.equal(loaded.lm_head(hidden), loaded(ids).logits)


def test_too_long_sequence_raises(model):
    n = model.config.n_positions
    model(torch.full((1, n), 3))  # exactly n_positions is fine
    with pytest.raises(ValueError, match="n_positions"):
        model(torch.full((1, n + 1), 3))
    # Also when the overflow comes from the cache, one token at a time.
    cache = DynamicCache()
    model(torch.full((1, n), 3), cache=cache, use_cache=True)
    with pytest.raises(ValueError, match="n_positions"):
        model(torch.full((1, 1), 3), cache=cache, use_cache=True)


def test_labels_loss_matches_manual_cross_entropy(model):
    torch.manual_seed(4)
    ids = torch.randint(2, 14, (3, 8))
    labels = ids.clone()
    labels[:, :4] = -100  # only the tail is scored, as in SFT
    labels[1, 6] = -100
    with torch.no_grad():
        out = model(ids, labels=labels)
    logp = torch.log_softmax(out.logits.double(), -1)
    total, count = 0.0, 0
    for b in range(3):
        for t in range(7):
            y = int(labels[b, t + 1])
            if y != -100:
                total -= float(logp[b, t, y])
                count += 1
    assert abs(out.loss.item() - total / count) < 1e-5
    # and the trivial case agrees with torch's own cross entropy
    with torch.no_grad():
        full = model(ids, labels=ids)
    ref = F.cross_entropy(full.logits[:, :-1].reshape(-1, 14), ids[:, 1:].reshape(-1))
    assert abs(full.loss.item() - ref.item()) < 1e-6


# ---- a conventional Hugging Face model


def test_backbone_gives_the_hidden_states_the_head_scores(model):
    ids = torch.randint(2, 14, (2, 6), generator=torch.Generator().manual_seed(3))
    assert type(model.base_model).__name__ == "TinyLMModel" and model.base_model is model.transformer
    hidden = model.base_model(ids).last_hidden_state  # (B, T, C)
    assert hidden.shape == (2, 6, model.config.n_embd)
    torch.testing.assert_close(model.lm_head(hidden), model(ids).logits, atol=0, rtol=0)


def test_activation_checkpointing_gives_the_same_gradients(tok):
    # Trainers turn it on (TRL's GRPOTrainer by default): the blocks are recomputed in backward, same math.
    torch.manual_seed(0)
    # (float64: two orders of the same sums, tests/_numerics.py)
    a = TinyLMForCausalLM(tiny_lm.TinyLMConfig(initializer_range=0.3)).train().double()
    b = TinyLMForCausalLM(a.config).train().double()
    b.load_state_dict(a.state_dict())
    # (transformers 5 renamed it; 4.x has only the old name)
    (getattr(b, "activation_checkpointing_enable", None) or b.gradient_checkpointing_enable)()
    enc = tok(["1+2=", "37+48="], padding=True, return_tensors="pt")
    grads, saved = [], []
    for m in (a, b):
        count = [0]

        def pack(t, count=count):
            count[0] += 1
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = m(**enc, labels=enc["input_ids"]).loss
        loss.backward()
        grads.append([p.grad for p in m.parameters()])
        saved.append(count[0])
    assert saved[1] < saved[0] / 2  # the blocks kept far fewer activations: checkpointing was on
    for ga, gb in zip(*grads, strict=True):
        assert_same_math(ga, gb)


@pytest.mark.slow
def test_saved_model_loads_with_remote_code_in_a_process_that_never_imported_tiny_lm(model, tok, tmp_path):
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert {"modeling_tiny_lm.py", "configuration_tiny_lm.py"} <= {p.name for p in tmp_path.iterdir()}
    want = model.generate(**tok(["37+48="], return_tensors="pt"), max_new_tokens=3, do_sample=False)
    want = tok.decode(want[0], skip_special_tokens=True)  # as the pipeline shows it
    script = (
        "import sys\n"
        "from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, pipeline\n"
        f"path = {str(tmp_path)!r}\n"
        "m = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)\n"
        "t = AutoTokenizer.from_pretrained(path, trust_remote_code=True)\n"
        "p = pipeline('text-generation', model=path, trust_remote_code=True)\n"
        "out = p('37+48=', max_new_tokens=3, do_sample=False)[0]['generated_text']\n"
        "assert not any(k == 'tiny_lm' or k.startswith(('tiny_lm.', 'tinygrpo')) for k in sys.modules), 'imported'\n"
        "print(type(m).__name__, type(m.base_model).__name__, len(t), repr(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    name, backbone, vocab, out = r.stdout.strip().splitlines()[-1].split(" ", 3)
    assert (name, backbone, int(vocab)) == ("TinyLMForCausalLM", "TinyLMModel", len(tok))
    assert out == repr(want)  # the prompt and the greedy tokens


def test_trl_trains_a_saved_tiny_lm_without_patches(model, tok, tmp_path):
    """TRL's GRPOTrainer and SFTTrainer take the saved directory by path (remote code, no adapter of ours)."""
    # CI installs .[test]: there a missing trl fails, it never skips
    trl = importlib.import_module("trl") if os.environ.get("CI") else pytest.importorskip("trl")
    from datasets import Dataset

    # TrainingArguments writes ACCELERATE_* variables that later Accelerators in this process would read
    environ = dict(os.environ)
    try:
        _train_with_trl(trl, Dataset, model, tok, tmp_path)
    finally:
        os.environ.clear()
        os.environ.update(environ)


def _train_with_trl(trl, Dataset, model, tok, tmp_path) -> None:
    path = tmp_path / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    common = dict(
        per_device_train_batch_size=8,
        max_steps=2,
        report_to="none",
        use_cpu=True,
        logging_strategy="no",
        save_strategy="no",
        bf16=False,
        model_init_kwargs={"trust_remote_code": True},
    )
    prompts = Dataset.from_dict({"prompt": ["1+2=", "3+4=", "2+2=", "5+1="], "answer": ["3", "7", "4", "6"]})

    def exact(completions, answer, **kw):
        return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]

    grpo = trl.GRPOConfig(
        output_dir=str(tmp_path / "grpo"), num_generations=4, max_completion_length=3, **common
    )
    trainer = trl.GRPOTrainer(
        model=str(path), reward_funcs=exact, args=grpo, train_dataset=prompts, processing_class=tok
    )
    trainer.train()
    assert trainer.state.global_step == 2
    pairs = Dataset.from_dict({"prompt": ["1+2=", "3+4="], "completion": ["3<eos>", "7<eos>"]})
    sft = trl.SFTConfig(output_dir=str(tmp_path / "sft"), **common)
    trainer = trl.SFTTrainer(model=str(path), args=sft, train_dataset=pairs, processing_class=tok)
    trainer.train()
    assert trainer.state.global_step == 2
