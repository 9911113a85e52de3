"""bf16 (autocast) forwards: AutocastBackend against the float32 forwards, and a bf16 training step (on the CPU)."""

from __future__ import annotations

import pytest
import torch
from _lm import encode
from test_grouped import PROMPTS, completions_with_eos

from tinygrpo.model.backend import AutocastBackend, GenericBackend, GroupedBackend
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.sampling import completion_logits, sample_completions


@pytest.mark.parametrize("grouped", [True, False])
def test_bf16_logits_are_the_float32_logits_to_bfloat16_precision(model, tok, grouped):
    inner = GroupedBackend() if grouped else GenericBackend()
    ids, pmask = encode(tok, PROMPTS[:3])
    comp, cmask = completions_with_eos(3, 4, 5, seed=1)
    want = completion_logits(model, ids, pmask, comp, 4, cmask, backend=inner)
    got = completion_logits(model, ids, pmask, comp, 4, cmask, backend=AutocastBackend(inner, "cpu"))
    assert got.dtype == torch.bfloat16 and want.dtype == torch.float32
    scored = cmask.bool()
    err = (got.float() - want)[scored].abs().max()
    # bfloat16 keeps 8 bits of mantissa: a relative error of ~2^-8 per rounding, a few roundings deep
    assert 0 < err <= 0.05 * want[scored].abs().max()


def test_bf16_decoding_samples_valid_completions_on_both_paths(model, tok):
    ids, pmask = encode(tok, PROMPTS)
    for inner in (GroupedBackend(), GenericBackend()):
        params = SamplingParams(6, temperature=1.0)
        ro = sample_completions(
            model,
            ids,
            pmask,
            4,
            params,
            torch.Generator().manual_seed(3),
            eos_token_id=1,
            pad_token_id=0,
            backend=AutocastBackend(inner, "cpu"),
        )
        assert ro.completion_ids.shape[0] == len(PROMPTS) * 4
        assert bool(((ro.completion_ids >= 0) & (ro.completion_ids < model.config.vocab_size)).all())


def test_a_bf16_training_step_keeps_float32_weights_and_moves_them(seed_reference, tmp_path):
    from tinygrpo.data.problems import load_split
    from tinygrpo.run.config import GRPOConfig
    from tinygrpo.run.launch import load_model_and_tokenizer
    from tinygrpo.run.trainer import GRPOTrainer

    model, tokenizer = load_model_and_tokenizer(seed_reference, "model")
    ref, _ = load_model_and_tokenizer(seed_reference, "ref")
    cfg = GRPOConfig(
        model_name_or_path=seed_reference,
        dataset_name="seed_bank",
        dataset_test_split=None,
        per_device_train_batch_size=32,
        beta=0.04,
        bf16=True,
        output_dir=str(tmp_path),
        save_steps=0,
        make_plots=False,
        disable_tqdm=True,
        max_steps=2,
    )
    trainer = GRPOTrainer(cfg, model, tokenizer, load_split("seed_bank", "train"), None, ref_model=ref)
    assert isinstance(trainer.backend, AutocastBackend)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    m = trainer.training_step().metrics
    assert all(v.dtype == torch.float32 for v in model.parameters())
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())
    assert m["kl"] == m["kl"] and m["loss"] == m["loss"]  # finite numbers, not NaN
