"""Tabular GRPO/REINFORCE (the seed demo) against token-level GRPO/REINFORCE on the tiny char GPT, same questions.

    python -m tinygrpo.compare --output-dir runs/compare [--seeds 5] [--quick]

On the seed demo's 36 questions a + b (a, b in 0..5, answers 0..12), every method samples groups of G = 8 answers
and is scored by greedy accuracy on the same 36 questions against the number of completions it has sampled:

  tabular REINFORCE / GRPO   `tinygrpo.bandit.train_demo` with the demo's settings (zero table, one random question
                             per step, 8 answers, SGD 0.08; GRPO: z-score, clip 0.2, exact KL 0.02 to the initial
                             table, zero-variance groups skipped). Seed i uses the demo's seed + i (42 + i for GRPO,
                             49 + i for REINFORCE), so seed 0 over the first 120 steps is the demo itself.
  token-level GRPO           `GRPOTrainer`, advantage_mode="grpo" (group z-score), beta = 0.02 with the exact
                             per-token KL (kl_estimator="full") to the starting model: the demo's KL coefficient.
  token-level REINFORCE      advantage_mode="reinforce" (raw 0/1 reward, no baseline) and beta = 0: like the demo's
                             REINFORCE, which has no KL term either.

Each token-level method starts from two SFT references (a 2-layer, 32-wide char GPT, 16 positions), trained per seed
with `tiny_lm.pretrain.train_reference`:
  format-only   every seed-bank prompt paired with each answer 0..12 once (468 rows): the model learns "a number
                then <eos>" and a near-uniform belief over 0..12, the transformer's analogue of the zero table.
  imperfect     the real answers of 12 of the 36 questions (a random subset per seed), for a short budget: it
                knows those 12 and a few more by generalisation, a fraction of the 36.
Token-level steps sample 8 prompts x 8 completions = 64 completions; the table samples 8 per step; every run gets
the same budget of sampled completions (19,200 by default: 2,400 table steps, 300 token-level steps; --quick: 640).

Outputs (in --output-dir): comparison.md, results.json, accuracy_vs_completions.png, skipped_fraction.png,
beliefs.png, plus the SFT references and the addition run's files. A second table checks 2-digit addition: held-out
accuracy of the addition reference (checkpoints/reference, else trained with tiny_lm.pretrain defaults) before and
after a token-level GRPO run with the trainer's defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from tinygrpo import bandit

G = bandit.DEMO_GROUP  # 8: the same group size everywhere
N_ANSWERS = bandit.N_ANSWERS  # 13 answers 0..12
N_QUESTIONS = bandit.N_QUESTIONS  # 36
TOKEN_SEED_BASE = 42
REPO_ROOT = Path(__file__).resolve().parent.parent
ADDITION_REFERENCE = "checkpoints/reference"

# method key -> (family, advantage, reference, label); the table's row order
METHODS = {
    "table_reinforce": ("table", "reinforce", None, "table REINFORCE"),
    "table_grpo": ("table", "grpo", None, "table GRPO"),
    "gpt_reinforce_format": ("gpt", "reinforce", "format_only", "char GPT REINFORCE, format-only SFT start"),
    "gpt_grpo_format": ("gpt", "grpo", "format_only", "char GPT GRPO, format-only SFT start"),
    "gpt_reinforce_imperfect": ("gpt", "reinforce", "imperfect", "char GPT REINFORCE, imperfect SFT start"),
    "gpt_grpo_imperfect": ("gpt", "grpo", "imperfect", "char GPT GRPO, imperfect SFT start"),
}
THRESHOLDS = (0.9, 1.0)


@dataclass
class Settings:
    seeds: int = 5
    budget: int = 19200  # sampled completions per run, every method
    prompts_per_step: int = 8  # token-level: 8 prompts x G = 64 completions per step
    token_lr: float = 3e-3
    token_beta: float = 0.02  # GRPO only; REINFORCE runs use 0 (the demo's REINFORCE has no KL)
    max_completion_length: int = 3  # "12<eos>"
    n_embd: int = 32
    n_head: int = 2
    n_layer: int = 2
    n_positions: int = 16
    sft_batch: int = 64
    sft_lr: float = 3e-3
    format_sft_steps: int = 200
    imperfect_sft_steps: int = 150
    imperfect_questions: int = 12
    belief_seed_index: int = 0
    addition_steps: int | None = None  # None: the trainer's default max_steps
    addition_reference_steps: int | None = None  # only if checkpoints/reference is missing; None: pretrain default
    quick: bool = False

    @property
    def table_steps(self) -> int:
        return self.budget // G

    @property
    def completions_per_token_step(self) -> int:
        return self.prompts_per_step * G

    @property
    def token_steps(self) -> int:
        return self.budget // self.completions_per_token_step


def quick_settings(seeds: int = 2) -> Settings:
    return Settings(seeds=seeds, budget=640, format_sft_steps=120, imperfect_sft_steps=100, addition_steps=2,
                    addition_reference_steps=150, quick=True)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# curve summaries


def first_reach(xs: Sequence[int], accs: Sequence[float], threshold: float) -> int | None:
    """The first x (completions sampled) at which greedy accuracy >= threshold; None if never."""
    for x, a in zip(xs, accs, strict=True):
        if a >= threshold - 1e-12:
            return int(x)
    return None


def mean_std(values: Sequence[float]) -> dict:
    """Mean and sample std (ddof=1; 0 for a single value) of the values, plus n."""
    v = np.asarray(list(values), dtype=np.float64)
    if v.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0, "n": int(v.size)}


def summarize_runs(runs: Sequence[dict]) -> dict:
    """Per-method numbers over seeds from the per-seed curves (x, acc, zero_var_frac)."""
    out = {
        "start_acc": mean_std([r["acc"][0] for r in runs]),
        "final_acc": mean_std([r["acc"][-1] for r in runs]),
        "final_zero_var_frac": mean_std([r["zero_var_frac"][-1] for r in runs]),
    }
    for t in THRESHOLDS:
        hits = [first_reach(r["x"], r["acc"], t) for r in runs]
        reached = [h for h in hits if h is not None]
        out[f"reach_{round(t * 100)}"] = {**mean_std(reached), "seeds": len(runs), "per_seed": hits}
    return out


def table_curves(hist: dict) -> dict:
    """Tabular history -> curves on the completions axis, with a point at 0 (the zero table)."""
    zero_var = [m in (0.0, 1.0) for m in hist["mean_reward"]]  # all 8 wrong or all 8 right
    cum = np.cumsum(zero_var) / np.arange(1, len(zero_var) + 1)
    start = greedy_acc_table(torch.zeros(N_QUESTIONS, N_ANSWERS))
    return {
        "seed": hist["seed"],
        "x": [0] + [G * (s + 1) for s in range(len(hist["acc"]))],
        "acc": [start] + list(hist["acc"]),
        "zero_var_frac": [0.0] + [float(c) for c in cum],
    }


def greedy_acc_table(logits: torch.Tensor) -> float:
    _, gold = bandit.build_seed_bank()
    return float((logits.argmax(-1) == torch.tensor(gold)).float().mean())


# ----------------------------------------------------------------------------------------------------------------
# tabular runs


def run_table(kind: str, seeds: Sequence[int], steps: int, belief_seed: int | None) -> tuple[list[dict], dict]:
    """One tabular run per seed; beliefs (36 x 13 probabilities) at start / midway / end for belief_seed."""
    runs, beliefs = [], {}
    for seed in seeds:
        policy, hist = bandit.train_demo(kind, seed, steps)
        runs.append(table_curves(hist))
        if seed == belief_seed:
            # the runs are deterministic and step-by-step identical to any longer run: train to midway again
            mid, _ = bandit.train_demo(kind, seed, steps // 2)
            beliefs = {
                "start": torch.full((N_QUESTIONS, N_ANSWERS), 1.0 / N_ANSWERS),
                "mid": mid.logits.detach().softmax(-1),
                "end": policy.logits.detach().softmax(-1),
                "x": [0, G * (steps // 2), G * steps],
            }
    return runs, beliefs


# ----------------------------------------------------------------------------------------------------------------
# the char GPT: references, token-level runs, exact answer beliefs


def _quiet() -> None:
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def load_model(path: Path | str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tiny_lm  # noqa: F401  (registers the model type)

    return AutoModelForCausalLM.from_pretrained(path, use_safetensors=True), AutoTokenizer.from_pretrained(path)


def _write_jsonl(rows: Sequence[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def seed_bank():
    from tinygrpo.problems import load_split

    return load_split("seed_bank", "train")


def build_references(out: Path, seed: int, st: Settings) -> dict:
    """Train the two SFT references of one seed; returns {name: {"path", "acc", ...}}."""
    from tiny_lm.pretrain import SFTConfig, train_reference

    bank = seed_bank()
    prompts, answers = list(bank["prompt"]), list(bank["answer"])
    rng = random.Random(seed)
    fmt_rows = [{"prompt": p, "answer": str(k)} for p in prompts for k in range(N_ANSWERS)]
    rng.shuffle(fmt_rows)
    subset = sorted(rng.sample(range(N_QUESTIONS), st.imperfect_questions))
    imp_rows = [{"prompt": prompts[i], "answer": answers[i]} for i in subset]
    refs = {}
    for name, rows, steps in (("format_only", fmt_rows, st.format_sft_steps),
                              ("imperfect", imp_rows, st.imperfect_sft_steps)):  # fmt: skip
        d = out / "references" / f"seed{seed}" / name
        _write_jsonl(rows, d / "data" / "train.jsonl")
        cfg = SFTConfig(output_dir=str(d / "model"), dataset=str(d / "data"), eval_split="", train_size=0,
                        max_steps=steps, batch_size=st.sft_batch, learning_rate=st.sft_lr, n_embd=st.n_embd,
                        n_head=st.n_head, n_layer=st.n_layer, n_positions=st.n_positions, log_every=0, seed=seed)  # fmt: skip
        summary = train_reference(cfg, verbose=False)
        model, tok = load_model(d / "model")
        acc, well_formed = seed_bank_greedy(model, tok, st.max_completion_length)
        refs[name] = {"path": str(d / "model"), "acc": acc, "well_formed": well_formed,
                      "sft_rows": len(rows), "sft_steps": steps, "sft_final_loss": summary["final_loss"]}  # fmt: skip
        if name == "imperfect":
            refs[name]["trained_question_ids"] = subset
    return refs


def seed_bank_greedy(model, tokenizer, max_new_tokens: int) -> tuple[float, float]:
    """Greedy accuracy on the 36 questions, and the fraction of greedy outputs of the form "<0..12><eos>"."""
    from tinygrpo.rollout import greedy_answers

    bank = seed_bank()
    outs = greedy_answers(model, tokenizer, bank["prompt"], max_new_tokens)
    acc = sum(o == a + "<eos>" for o, a in zip(outs, bank["answer"], strict=True)) / len(outs)
    valid = {f"{k}<eos>" for k in range(N_ANSWERS)}
    return acc, sum(o in valid for o in outs) / len(outs)


@torch.no_grad()
def answer_beliefs(model, tokenizer) -> torch.Tensor:
    """(36, 13): probability of each complete answer "k<eos>", k = 0..12, per question (product of token probs).

    Exact: all 13 candidate completions are scored with `completion_logits` (rows sum to <= 1; the rest of the
    mass is on malformed strings).
    """
    from tinygrpo.rollout import completion_logits

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


def run_token(method: str, ref: dict, seed: int, out: Path, st: Settings, want_beliefs: bool) -> tuple[dict, dict]:
    """One token-level run from a reference; greedy accuracy on the 36 questions after every step."""
    from accelerate import Accelerator

    from tinygrpo.config import GRPOConfig
    from tinygrpo.trainer import GRPOTrainer

    _, mode, _, _ = METHODS[method]
    beta = st.token_beta if mode == "grpo" else 0.0
    run_dir = out / "token_runs" / method / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = GRPOConfig(model_name_or_path=ref["path"], dataset="seed_bank", eval_split="train", num_generations=G,
                     per_device_train_batch_size=st.completions_per_token_step, learning_rate=st.token_lr,
                     beta=beta, kl_estimator="full", advantage_mode=mode, max_completion_length=st.max_completion_length,
                     max_steps=st.token_steps, seed=seed, output_dir=str(run_dir), disable_tqdm=True,
                     make_plots=False, save_steps=0, dynamic_sampling=False)  # fmt: skip
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
        m = trainer.training_step()
        trainer.step += 1
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
        beliefs["x"] = [0, mid * st.completions_per_token_step, st.token_steps * st.completions_per_token_step]
    _, well_formed = seed_bank_greedy(model, tok, st.max_completion_length)
    run = {"seed": seed, "x": xs, "acc": accs, "zero_var_frac": zero_var, "mean_reward": rewards,
           "final_well_formed": well_formed, "beta": beta}  # fmt: skip
    return run, beliefs


# ----------------------------------------------------------------------------------------------------------------
# 2-digit addition: what a table cannot do


def addition_section(out: Path, st: Settings, log: Callable[[str], None]) -> dict:
    from accelerate import Accelerator

    from tiny_lm.pretrain import SFTConfig, train_reference
    from tinygrpo.config import GRPOConfig
    from tinygrpo.problems import load_split
    from tinygrpo.trainer import GRPOTrainer

    ref_path = next((p for p in (Path(ADDITION_REFERENCE), REPO_ROOT / ADDITION_REFERENCE)
                     if (p / "config.json").is_file()), None)  # fmt: skip
    trained_here = ref_path is None
    if trained_here:
        ref_path = out / "addition_reference"
        kw = {} if st.addition_reference_steps is None else {"max_steps": st.addition_reference_steps}
        log(f"no {ADDITION_REFERENCE}: training the addition reference into {ref_path} (tiny_lm.pretrain, {kw or 'defaults'})")
        train_reference(SFTConfig(output_dir=str(ref_path), log_every=0, **kw), verbose=False)
    sft_cfg = json.loads((ref_path / "sft_config.json").read_text()) if (ref_path / "sft_config.json").is_file() else {}
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
        m = trainer.training_step()
        trainer.step += 1
    after = trainer.evaluate()["eval/accuracy"]
    train_q = set(train["prompt"])
    return {
        "reference": str(ref_path if not ref_path.is_relative_to(REPO_ROOT) else ref_path.relative_to(REPO_ROOT)),
        "reference_trained_here": trained_here,
        "reference_sft": {k: sft_cfg.get(k) for k in ("train_size", "max_steps", "n_embd", "n_layer")},
        "test_problems": len(test),
        "test_unseen_by_grpo": sum(p not in train_q for p in test["prompt"]),
        "acc_reference": before,
        "acc_after_grpo": after,
        "grpo_steps": cfg.max_steps,
        "grpo_completions": int(m["num_completions"]),
        "grpo_settings": {"per_device_train_batch_size": cfg.per_device_train_batch_size, "num_generations":
                          cfg.num_generations, "learning_rate": cfg.learning_rate, "beta": cfg.beta,
                          "advantage_mode": cfg.advantage_mode, "loss_type": cfg.loss_type},  # fmt: skip
        "seconds": time.perf_counter() - t0,
    }


# ----------------------------------------------------------------------------------------------------------------
# plots


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PANELS = (("table", None, "table (seed demo), zero init"), ("gpt", "format_only", "char GPT, format-only SFT start"),
          ("gpt", "imperfect", "char GPT, imperfect SFT start"))  # fmt: skip
STYLE = {"grpo": ("C0", "GRPO"), "reinforce": ("C3", "REINFORCE")}


def _panel_methods(family: str, ref: str | None) -> list[str]:
    return [k for k, (f, _, r, _) in METHODS.items() if f == family and r == ref]


def plot_curves(results: dict, key: str, ylabel: str, path: Path, title: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    for ax, (family, ref, panel_title) in zip(axes, PANELS, strict=True):
        for method in _panel_methods(family, ref):
            runs = results["methods"][method]["runs"]
            first = 0 if key == "acc" else 1  # no zero-variance fraction before the first group
            x = np.asarray(runs[0]["x"][first:])
            ys = np.asarray([r[key][first:] for r in runs])  # (seeds, points)
            color, name = STYLE[METHODS[method][1]]
            ax.plot(x, ys.mean(0), color=color, lw=2, label=f"{name} (mean of {len(runs)} seeds)")
            ax.fill_between(x, ys.min(0), ys.max(0), color=color, alpha=0.2, lw=0, label=f"{name} min-max")
        if key == "acc":
            ax.axhline(0.9, color="gray", ls=":", lw=1)
        ax.set(title=panel_title, xlabel="completions sampled", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right" if key == "acc" else "upper left", fontsize=8)
    axes[0].set_ylabel(ylabel)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_beliefs(table_b: dict, gpt_b: dict, path: Path, table_seed: int, gpt_seed: int) -> None:
    plt = _plt()
    _, gold = bandit.build_seed_bank()
    fig, axes = plt.subplots(2, 3, figsize=(12, 13), sharex=True, sharey=True)
    rows = ((table_b, f"table GRPO, zero init (seed {table_seed})"),
            (gpt_b, f"char GPT GRPO, format-only start (seed {gpt_seed})"))  # fmt: skip
    qlabels = [f"{a}+{b}" for a in range(bandit.N_A) for b in range(bandit.N_B)]
    im = None
    for r, (b, name) in enumerate(rows):
        for c, stage in enumerate(("start", "midway", "end")):
            ax = axes[r, c]
            p = np.asarray(b[("start", "mid", "end")[c]], dtype=np.float64)
            im = ax.imshow(p, cmap="viridis", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
            ax.scatter(gold, range(N_QUESTIONS), marker="o", s=14, facecolors="none", edgecolors="red", lw=0.8)
            ax.set_title(f"{stage}: {b['x'][c]:,} completions\nmass on answers 0..12: {p.sum(1).mean():.2f}",
                         fontsize=9)  # fmt: skip
            ax.set_xticks(range(N_ANSWERS), [str(k) for k in range(N_ANSWERS)], fontsize=7)
            ax.set_yticks(range(N_QUESTIONS), qlabels, fontsize=6)
            if c == 0:
                ax.set_ylabel(f"{name}\n\nquestion", fontsize=10)
            if r == 1:
                ax.set_xlabel("answer k (red circle: correct a+b)")
    fig.colorbar(im, ax=axes, shrink=0.5, label='P(answer k)   (char GPT: P("k<eos>") = product of its token probs)')
    fig.suptitle("Beliefs over the 13 answers for the 36 questions (top: table; bottom: char GPT)")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------------
# the report


def _fmt(ms: dict, digits: int) -> str:
    if ms["mean"] is None:
        return "not reached"
    return f"{ms['mean']:.{digits}f} ± {ms['std']:.{digits}f}"


def _reach_cell(r: dict) -> str:
    if r["n"] == 0:
        return "not reached"
    cell = _fmt(r, 0)
    return cell if r["n"] == r["seeds"] else f"{cell} ({r['n']}/{r['seeds']} seeds)"


def table_rows(results: dict) -> list[list[str]]:
    rows = []
    for method, (_, _, _, label) in METHODS.items():
        s = results["methods"][method]["summary"]
        rows.append([label, _fmt(s["start_acc"], 3), _fmt(s["final_acc"], 3), _reach_cell(s["reach_90"]),
                     _reach_cell(s["reach_100"]), _fmt(s["final_zero_var_frac"], 3)])  # fmt: skip
    return rows


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def findings(results: dict) -> str:
    """Plain-words reading of the numbers, generated from them (no claim the data do not carry)."""
    S = {m: results["methods"][m]["summary"] for m in METHODS}
    B = results["settings"]["budget"]

    def acc(m):
        return S[m]["final_acc"]["mean"]

    def reach(m, t):
        r = S[m][f"reach_{t}"]
        return r["mean"] if r["n"] == r["seeds"] else None  # only when every seed got there

    def cmp(g, r, what):
        ag, ar = acc(g), acc(r)
        if abs(ag - ar) < 0.02:
            verdict = f"GRPO and REINFORCE end level ({ag:.3f} vs {ar:.3f})"
        elif ag > ar:
            verdict = f"GRPO ends higher ({ag:.3f} vs {ar:.3f})"
        else:
            verdict = f"GRPO does NOT beat REINFORCE: it ends lower ({ag:.3f} vs {ar:.3f})"
        sg, sr = S[g]["final_acc"]["std"], S[r]["final_acc"]["std"]
        if abs(ag - ar) >= 0.02 and abs(ag - ar) < max(sg, sr):
            verdict += f", a gap smaller than the seed-to-seed std ({sg:.3f}, {sr:.3f})"
        parts = []
        for t in (90, 100):
            rg, rr = reach(g, t), reach(r, t)
            if rg is not None and rr is not None:
                faster = "GRPO" if rg < rr else "REINFORCE" if rr < rg else "neither"
                spread = max(S[g][f"reach_{t}"]["std"], S[r][f"reach_{t}"]["std"])
                note = f"faster: {faster}" + (f", by less than the seed std {spread:.0f}" if abs(rg - rr) < spread else "")
                parts.append(f"{t} % is reached after {rg:.0f} vs {rr:.0f} completions ({note})")
            else:
                ng, nr = S[g][f"reach_{t}"]["n"], S[r][f"reach_{t}"]["n"]
                if ng == nr == 0:
                    parts.append(f"neither reaches {t} % on any seed")
                else:
                    parts.append(f"{t} % is reached on {ng} (GRPO) vs {nr} (REINFORCE) of {S[g][f'reach_{t}']['seeds']} seeds")
        return f"{what}: {verdict}; " + "; ".join(parts) + "."

    out = [
        cmp("table_grpo", "table_reinforce", "On the table"),
        cmp("gpt_grpo_format", "gpt_reinforce_format", "On the char GPT from the format-only start"),
        cmp("gpt_grpo_imperfect", "gpt_reinforce_imperfect", "On the char GPT from the imperfect SFT start"),
    ]
    tbl, gpt = acc("table_grpo"), acc("gpt_grpo_format")
    rel = "above" if gpt > tbl + 0.02 else "below" if gpt < tbl - 0.02 else "level with"
    out.append(
        f"From equally ignorant starts (zero table vs format-only GPT), token-level GRPO ends {rel} tabular GRPO "
        f"after {B:,} completions ({gpt:.3f} vs {tbl:.3f}); the imperfect SFT start begins at "
        f"{S['gpt_grpo_imperfect']['start_acc']['mean']:.3f} instead of "
        f"{S['gpt_grpo_format']['start_acc']['mean']:.3f} and ends at {acc('gpt_grpo_imperfect'):.3f}."
    )
    zt, zg = S["table_grpo"]["final_zero_var_frac"]["mean"], S["gpt_grpo_format"]["final_zero_var_frac"]["mean"]
    out.append(
        f"Zero-variance groups (all 8 answers right or all wrong) are {zt:.0%} of the table GRPO's groups and "
        f"{zg:.0%} of the format-only GPT GRPO's: GRPO gets no policy-gradient signal from them (the table skips "
        f"the update; the GPT keeps only the KL term), while REINFORCE still pushes on the all-right ones."
    )
    return "\n\n".join(out)


def write_report(results: dict, out: Path) -> str:
    st = results["settings"]
    refs = results["references"]
    header = ["method", "greedy acc at start", f"greedy acc after {st['budget']:,} completions",
              "completions to 90 %", "completions to 100 %", "zero-variance groups (cumulative fraction)"]  # fmt: skip
    fmt_acc = mean_std([r["format_only"]["acc"] for r in refs.values()])
    fmt_wf = mean_std([r["format_only"]["well_formed"] for r in refs.values()])
    imp_acc = mean_std([r["imperfect"]["acc"] for r in refs.values()])
    add = results["addition"]
    n = st["seeds"]
    lines = [
        "# Tabular vs token-level GRPO on the seed demo's 36 questions",
        "",
        f"Generated by `python -m tinygrpo.compare{' --quick' if st['quick'] else ''} --seeds {n}` "
        f"({results['seconds']:.0f} s). Every number is mean ± std (sample std, ddof = 1) over {n} seeds; "
        f"all of them are in `results.json`.",
        "",
        _md_table(header, table_rows(results)),
        "",
        f"Greedy accuracy is on the 36 training questions, measured after every step: the table's argmax per row; "
        f"the char GPT's greedy decoding (a completion must be exactly `k<eos>`). "
        f"\"Completions to X %\" is the first point at which greedy accuracy ≥ X, mean ± std over the seeds that "
        f"got there (the count is given when not all did). Every run samples {st['budget']:,} completions in groups "
        f"of G = {G}: the table {G} per step (one random question, {st['table_steps']} steps); the char GPT "
        f"{st['prompts_per_step']} prompts x {G} = {st['completions_per_token_step']} per step "
        f"({st['token_steps']} steps), so its curve has a point every {st['completions_per_token_step']} "
        f"completions and the table's every {G}.",
        "",
        "## What the numbers say",
        "",
        findings(results),
        "",
        "## Setup",
        "",
        f"- **Table** (`tinygrpo.bandit.train_demo`, the seed demo's settings): zero-initialised 36 x 13 logits, SGD "
        f"lr {bandit.DEMO_LR}; GRPO = group z-score, clip {bandit.DEMO_CLIP_EPS}, exact KL {bandit.DEMO_KL_BETA} to "
        f"the initial table, update skipped on zero-variance groups; REINFORCE = raw 0/1 reward, no baseline. Seed i "
        f"is the demo's seed + i (GRPO {bandit.DEMO_SEEDS['grpo']} + i, REINFORCE {bandit.DEMO_SEEDS['reinforce']} + i).",
        f"- **Char GPT** ({st['n_layer']} layers, width {st['n_embd']}, {st['n_head']} heads, {st['n_positions']} "
        f"positions), `GRPOTrainer`: AdamW lr {st['token_lr']} with the trainer's default cosine decay, max {st['max_completion_length']} completion tokens, "
        f"strict accuracy reward, loss_type dapo, one optimisation pass per batch (ratio = 1, so the clip never "
        f"acts — as in the table, where old = current policy too). GRPO: advantage_mode grpo (group z-score), "
        f"beta = {st['token_beta']} with the exact per-token KL (kl_estimator full) to the starting model — the "
        f"demo's coefficient. REINFORCE: advantage_mode reinforce (raw reward), beta = 0 (the demo's REINFORCE has "
        f"no KL either). Prompts are drawn without replacement, a fresh permutation of the 36 per epoch "
        f"(the table draws one question uniformly at random per step). Seeds {TOKEN_SEED_BASE}..{TOKEN_SEED_BASE + n - 1}.",
        f"- **Format-only reference** (one per seed): SFT on every seed-bank prompt paired with each answer 0..12 "
        f"once ({N_QUESTIONS * N_ANSWERS} rows, {st['format_sft_steps']} steps of batch {st['sft_batch']}). Greedy "
        f"accuracy {_fmt(fmt_acc, 3)} (chance 1/13 = {1 / 13:.3f}); greedy output well-formed (`k<eos>`, k in 0..12) "
        f"{_fmt(fmt_wf, 3)}. Greedy decoding takes the likeliest first token, and '1' starts four of the 13 answers "
        f"(1, 10, 11, 12), so its greedy answers cluster on those.",
        f"- **Imperfect reference** (one per seed): SFT on the real answers of {st['imperfect_questions']} of the 36 "
        f"questions (a random subset per seed), {st['imperfect_sft_steps']} steps of batch {st['sft_batch']}. "
        f"Greedy accuracy {_fmt(imp_acc, 3)} on the 36.",
        "",
        "![accuracy vs completions](accuracy_vs_completions.png)",
        "",
        "![zero-variance groups](skipped_fraction.png)",
        "",
        "`beliefs.png`: P(answer k) for each of the 36 questions at the start, midway and end, for table GRPO and "
        "for the char GPT's GRPO from the format-only start (first seed of each). For the GPT, P(\"k<eos>\") is the "
        "exact product of its token probabilities (all 13 candidates scored with `completion_logits`); the rest of "
        "each row's mass is on malformed strings.",
        "",
        "![beliefs](beliefs.png)",
        "",
        "## 2-digit addition: generalising to unseen questions",
        "",
        _md_table(
            ["policy", f"greedy accuracy on the {add['test_problems']} held-out test problems"],
            [[f"SFT reference (`{add['reference']}`)", f"{add['acc_reference']:.3f}"],
             [f"after token-level GRPO ({add['grpo_steps']} steps, {add['grpo_completions']:,} completions)",
              f"{add['acc_after_grpo']:.3f}"]],
        ),  # fmt: skip
        "",
        f"GRPO trains on the train split only; none of the {add['test_problems']} test problems is ever sampled in "
        f"training ({add['test_unseen_by_grpo']} of {add['test_problems']} are absent from the train split). "
        f"Trainer defaults (batch {add['grpo_settings']['per_device_train_batch_size']} completions, "
        f"G = {add['grpo_settings']['num_generations']}, lr {add['grpo_settings']['learning_rate']}, beta "
        f"{add['grpo_settings']['beta']}){' except fewer steps (--quick)' if st['quick'] else ''}. "
        f"A table cannot do this at all: it has one row of logits per question it has seen, and no row for an "
        f"unseen question, so its held-out accuracy is undefined (at best a uniform guess).",
        "",
    ]
    text = "\n".join(lines)
    (out / "comparison.md").write_text(text)
    return text


# ----------------------------------------------------------------------------------------------------------------
# main


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def run(out: Path, st: Settings, log: Callable[[str], None] = print) -> dict:
    t0 = time.perf_counter()
    _quiet()
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"settings": {**asdict(st), "table_steps": st.table_steps, "token_steps": st.token_steps,
                                  "completions_per_token_step": st.completions_per_token_step, "group_size": G}}  # fmt: skip
    methods: dict = {}
    beliefs: dict = {}
    # tables
    for kind in ("reinforce", "grpo"):
        seeds = [bandit.DEMO_SEEDS[kind] + i for i in range(st.seeds)]
        runs, b = run_table(kind, seeds, st.table_steps, seeds[st.belief_seed_index] if kind == "grpo" else None)
        methods[f"table_{kind}"] = {"seeds": seeds, "runs": runs}
        if b:
            beliefs["table"] = {**b, "seed": seeds[st.belief_seed_index]}
        log(f"table {kind}: final acc {[round(r['acc'][-1], 3) for r in runs]}")
    # char GPT
    refs: dict = {}
    token_seeds = [TOKEN_SEED_BASE + i for i in range(st.seeds)]
    for i, seed in enumerate(token_seeds):
        t = time.perf_counter()
        refs[str(seed)] = r = build_references(out, seed, st)
        log(f"seed {seed}: references format-only acc {r['format_only']['acc']:.3f} (well-formed "
            f"{r['format_only']['well_formed']:.2f}), imperfect acc {r['imperfect']['acc']:.3f} "
            f"[{time.perf_counter() - t:.1f}s]")  # fmt: skip
        for method, (family, _, ref_name, _) in METHODS.items():
            if family != "gpt":
                continue
            t = time.perf_counter()
            want = i == st.belief_seed_index and method == "gpt_grpo_format"
            run_, b = run_token(method, r[ref_name], seed, out, st, want)
            methods.setdefault(method, {"seeds": token_seeds, "runs": []})["runs"].append(run_)
            if want:
                beliefs["gpt"] = {**b, "seed": seed}
            log(f"  {method}: acc {run_['acc'][0]:.3f} -> {run_['acc'][-1]:.3f}, zero-var "
                f"{run_['zero_var_frac'][-1]:.2f} [{time.perf_counter() - t:.1f}s]")  # fmt: skip
    for m in methods.values():
        m["summary"] = summarize_runs(m["runs"])
    results["methods"] = {k: methods[k] for k in METHODS}
    results["references"] = refs
    results["beliefs"] = {k: {s: v for s, v in b.items()} for k, b in beliefs.items()}
    # addition
    t = time.perf_counter()
    results["addition"] = addition_section(out, st, log)
    log(f"addition: {results['addition']['acc_reference']:.3f} -> {results['addition']['acc_after_grpo']:.3f} "
        f"[{time.perf_counter() - t:.1f}s]")  # fmt: skip
    # outputs
    plot_curves(results, "acc", "greedy accuracy (36 questions)", out / "accuracy_vs_completions.png",
                "Greedy accuracy vs completions sampled (G = 8; band: min-max over seeds)")  # fmt: skip
    plot_curves(results, "zero_var_frac", "cumulative fraction of zero-variance groups", out / "skipped_fraction.png",
                "Zero-variance groups (all 8 right or all 8 wrong): GRPO gets no advantage from them")  # fmt: skip
    plot_beliefs(beliefs["table"], beliefs["gpt"], out / "beliefs.png", beliefs["table"]["seed"], beliefs["gpt"]["seed"])
    results["seconds"] = time.perf_counter() - t0
    results["table"] = {"header_methods": list(METHODS), "rows": table_rows(results)}
    write_report(results, out)
    (out / "results.json").write_text(json.dumps(_jsonable(results), indent=1) + "\n")
    log(f"wrote {out / 'comparison.md'} and results.json, 3 PNGs in {results['seconds']:.0f}s")
    return results


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tinygrpo.compare", description=__doc__.split("\n")[0])
    p.add_argument("--output-dir", type=Path, default=Path("runs/compare"))
    p.add_argument("--seeds", type=int, default=None, help="seeds per method (default 5; 2 with --quick)")
    p.add_argument("--quick", action="store_true", help="CI smoke test: 2 seeds, 640 completions, 2 addition steps")
    p.add_argument("--threads", type=int, default=1, help="torch threads (tiny tensors: 1 is fastest)")
    return p


def main(argv: Sequence[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    st = quick_settings() if args.quick else Settings()
    if args.seeds is not None:
        if args.seeds < 1:
            raise SystemExit("error: --seeds must be >= 1")
        st.seeds = args.seeds
    return run(args.output_dir, st)


if __name__ == "__main__":
    main()
