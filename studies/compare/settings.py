"""What the comparison measures: the methods, the budget, and how per-seed curves are summarised."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinygrpo.oracles import bandit

G = bandit.DEMO_GROUP  # 8: the same group size everywhere
N_ANSWERS = bandit.N_ANSWERS  # 13 answers 0..12
N_QUESTIONS = bandit.N_QUESTIONS  # 36
TOKEN_SEED_BASE = 42
REPO_ROOT = Path(__file__).resolve().parents[2]
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
    offsets: tuple[int, ...] | None = (
        None  # the seeds, as offsets from each method's base (None: 0 .. seeds - 1)
    )
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
    # only if checkpoints/reference is missing; None: the SFT default
    addition_reference_steps: int | None = None
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
    return Settings(
        seeds=seeds,
        budget=640,
        format_sft_steps=120,
        imperfect_sft_steps=100,
        addition_steps=2,
        addition_reference_steps=150,
        quick=True,
    )


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
