"""The char GPT's side of the comparison: SFT references, token-level runs, exact answer beliefs, 2-digit addition."""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .settings import ADDITION_REFERENCE, METHODS, N_ANSWERS, N_QUESTIONS, REPO_ROOT, G, Settings

# ----------------------------------------------------------------------------------------------------------------
# the char GPT: references, token-level runs, exact answer beliefs


def quiet() -> None:
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def load_model(path: Path | str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny_lm  # noqa: F401  (registers the model type)

    return AutoModelForCausalLM.from_pretrained(path, use_safetensors=True), AutoTokenizer.from_pretrained(
        path
    )


def _write_jsonl(rows: Sequence[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@functools.cache
def seed_bank():
    from tinygrpo.data.problems import load_split

    return load_split("seed_bank", "train")


def build_references(out: Path, seed: int, st: Settings) -> dict:
    """Train the two SFT references of one seed; returns {name: {"path", "acc", ...}}."""
    from tinygrpo.sft.train import SFTConfig, train_reference

    bank = seed_bank()
    prompts, answers = list(bank["prompt"]), list(bank["answer"])
    rng = random.Random(seed)
    fmt_rows = [{"prompt": p, "answer": str(k)} for p in prompts for k in range(N_ANSWERS)]
    rng.shuffle(fmt_rows)
    subset = sorted(rng.sample(range(N_QUESTIONS), st.imperfect_questions))
    imp_rows = [{"prompt": prompts[i], "answer": answers[i]} for i in subset]
    refs = {}
    for name, rows, steps in (
        ("format_only", fmt_rows, st.format_sft_steps),
        ("imperfect", imp_rows, st.imperfect_sft_steps),
    ):
        d = out / "references" / f"seed{seed}" / name
        _write_jsonl(rows, d / "data" / "train.jsonl")
        cfg = SFTConfig(
            output_dir=str(d / "model"),
            overwrite_output_dir=True,  # (the study owns its directory: a rerun replaces its references)
            dataset_name=str(d / "data"),
            dataset_test_split="",
            train_size=0,
            max_steps=steps,
            per_device_train_batch_size=st.sft_batch,
            learning_rate=st.sft_lr,
            n_embd=st.n_embd,
            n_head=st.n_head,
            n_layer=st.n_layer,
            n_positions=st.n_positions,
            logging_steps=0,
            seed=seed,
        )
        summary = train_reference(cfg, verbose=False)
        model, tok = load_model(d / "model")
        acc, well_formed = seed_bank_greedy(model, tok, st.max_completion_length)
        refs[name] = {
            "path": str(d / "model"),
            "acc": acc,
            "well_formed": well_formed,
            "sft_rows": len(rows),
            "sft_steps": steps,
            "sft_final_loss": summary["final_loss"],
        }
        if name == "imperfect":
            refs[name]["trained_question_ids"] = subset
    return refs


def seed_bank_greedy(model, tokenizer, max_new_tokens: int) -> tuple[float, float]:
    """Greedy accuracy on the 36 questions, and the fraction of greedy outputs of the form "<0..12><eos>"."""
    from tinygrpo.rollout.evaluation import greedy_accuracy

    bank = seed_bank()
    acc, outs = greedy_accuracy(model, tokenizer, bank.to_dict(), max_new_tokens)
    valid = {f"{k}<eos>" for k in range(N_ANSWERS)}
    return acc, sum(o in valid for o in outs) / len(outs)


@torch.no_grad()
def answer_beliefs(model, tokenizer) -> torch.Tensor:
    """(36, 13): probability of each complete answer "k<eos>", k = 0..12, per question (product of token probs).

    Exact: all 13 candidate completions are scored with `completion_logits` (rows sum to <= 1; the rest of the
    mass is on malformed strings).
    """
    from tinygrpo.rollout.sampling import completion_logits

    bank = seed_bank()
    enc = tokenizer(list(bank["prompt"]), padding=True, return_tensors="pt")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    cands = [tokenizer(str(k), add_special_tokens=False)["input_ids"] + [eos] for k in range(N_ANSWERS)]
    T = max(len(c) for c in cands)
    comp = torch.tensor([c + [pad] * (T - len(c)) for c in cands])  # (13, T)
    mask = torch.tensor([[1] * len(c) + [0] * (T - len(c)) for c in cands], dtype=torch.float32)  # (13, T)
    comp_all = comp.repeat(N_QUESTIONS, 1)  # (36 * 13, T): rows grouped by question
    was_training = model.training
    model.eval()
    logits = completion_logits(model, enc["input_ids"], enc["attention_mask"], comp_all, N_ANSWERS)
    model.train(was_training)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, comp_all[..., None]).squeeze(-1)  # (36 * 13, T)
    seq = (logp * mask.repeat(N_QUESTIONS, 1)).sum(-1)  # (36 * 13,)
    return seq.exp().view(N_QUESTIONS, N_ANSWERS)


def run_token(
    method: str, ref: dict, seed: int, out: Path, st: Settings, want_beliefs: bool
) -> tuple[dict, dict]:
    """One token-level run from a reference; greedy accuracy on the 36 questions after every step."""
    from accelerate import Accelerator

    from tinygrpo.run.config import GRPOConfig
    from tinygrpo.run.trainer import GRPOTrainer

    _, mode, _, _ = METHODS[method]
    beta = st.token_beta if mode == "grpo" else 0.0
    run_dir = out / "token_runs" / method / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = GRPOConfig(
        model_name_or_path=ref["path"],
        dataset_name="seed_bank",
        dataset_test_split="train",
        allow_overlapping_splits=True,  # (the seed bank: judged on its own 36 questions, as the table is)
        num_generations=G,
        per_device_train_batch_size=st.completions_per_token_step,
        learning_rate=st.token_lr,
        beta=beta,
        kl_estimator="full",
        advantage_mode=mode,
        max_completion_length=st.max_completion_length,
        max_steps=st.token_steps,
        seed=seed,
        output_dir=str(run_dir),
        disable_tqdm=True,
        make_plots=False,
        save_steps=0,
        dynamic_sampling=False,
        prompt_sampler="uniform",  # plain GRPO, as the table runs it: every question every step, no explore rounds
        explore_rounds=0,
    )
    model, tok = load_model(ref["path"])
    ref_model = load_model(ref["path"])[0] if beta > 0 else None
    bank = seed_bank()
    trainer = GRPOTrainer(cfg, model, tok, bank, bank, ref_model=ref_model, accelerator=Accelerator(cpu=True))
    xs, accs, zero_var = [0], [trainer.evaluate()["eval/accuracy"]], [0.0]
    n_groups = n_zero = 0.0
    rewards = []
    mid = st.token_steps // 2
    beliefs = {"start": answer_beliefs(model, tok)} if want_beliefs else {}
    for _ in range(st.token_steps):
        m = trainer.training_step().metrics
        groups = st.prompts_per_step
        n_groups += groups
        n_zero += m["frac_reward_zero_std"] * groups
        xs.append(int(m["num_completions"]))
        accs.append(trainer.evaluate()["eval/accuracy"])
        zero_var.append(n_zero / n_groups)
        rewards.append(m["reward"])
        if want_beliefs and trainer.step == mid:
            beliefs["mid"] = answer_beliefs(model, tok)
    if want_beliefs:
        beliefs["end"] = answer_beliefs(model, tok)
        beliefs["x"] = [
            0,
            mid * st.completions_per_token_step,
            st.token_steps * st.completions_per_token_step,
        ]
    _, well_formed = seed_bank_greedy(model, tok, st.max_completion_length)
    run = {
        "seed": seed,
        "x": xs,
        "acc": accs,
        "zero_var_frac": zero_var,
        "mean_reward": rewards,
        "final_well_formed": well_formed,
        "beta": beta,
    }
    return run, beliefs


# ----------------------------------------------------------------------------------------------------------------
# 2-digit addition: what a table cannot do


def addition_section(out: Path, st: Settings, log: Callable[[str], None]) -> dict:
    from accelerate import Accelerator

    from tinygrpo.data.problems import load_split
    from tinygrpo.run.config import GRPOConfig
    from tinygrpo.run.trainer import GRPOTrainer
    from tinygrpo.sft.train import SFTConfig, train_reference

    ref_path = next(
        (
            p
            for p in (Path(ADDITION_REFERENCE), REPO_ROOT / ADDITION_REFERENCE)
            if (p / "config.json").is_file()
        ),
        None,
    )
    trained_here = ref_path is None
    if trained_here:
        ref_path = out / "addition_reference"
        kw = {} if st.addition_reference_steps is None else {"max_steps": st.addition_reference_steps}
        log(
            f"no {ADDITION_REFERENCE}: training the addition reference into {ref_path} (tinygrpo.sft.train, {kw or 'defaults'})"
        )
        train_reference(
            SFTConfig(output_dir=str(ref_path), overwrite_output_dir=True, logging_steps=0, **kw),
            verbose=False,
        )
    sft_cfg = (
        json.loads((ref_path / "sft_config.json").read_text())
        if (ref_path / "sft_config.json").is_file()
        else {}
    )
    model, tok = load_model(ref_path)
    run_dir = out / "addition_grpo"
    run_dir.mkdir(parents=True, exist_ok=True)
    kw = {} if st.addition_steps is None else {"max_steps": st.addition_steps}
    cfg = GRPOConfig(output_dir=str(run_dir), disable_tqdm=True, make_plots=False, save_steps=0, **kw)
    train, test = load_split("addition", "train"), load_split("addition", "test")
    trainer = GRPOTrainer(cfg, model, tok, train, test, accelerator=Accelerator(cpu=True))
    t0 = time.perf_counter()
    before = trainer.evaluate()["eval/accuracy"]
    for _ in range(cfg.max_steps):
        m = trainer.training_step().metrics
    after = trainer.evaluate()["eval/accuracy"]
    train_q = set(train["prompt"])
    return {
        "reference": str(
            ref_path if not ref_path.is_relative_to(REPO_ROOT) else ref_path.relative_to(REPO_ROOT)
        ),
        "reference_trained_here": trained_here,
        "reference_sft": {k: sft_cfg.get(k) for k in ("train_size", "max_steps", "n_embd", "n_layer")},
        "test_problems": len(test),
        "test_unseen_by_grpo": sum(p not in train_q for p in test["prompt"]),
        "acc_reference": before,
        "acc_after_grpo": after,
        "grpo_steps": cfg.max_steps,
        "grpo_completions": int(m["num_completions"]),
        "grpo_settings": {
            "per_device_train_batch_size": cfg.per_device_train_batch_size,
            "num_generations": cfg.num_generations,
            "learning_rate": cfg.learning_rate,
            "beta": cfg.beta,
            "advantage_mode": cfg.advantage_mode,
            "loss_type": cfg.loss_type,
        },
        "seconds": time.perf_counter() - t0,
    }
