"""The variants the estimators study measures (GRPOConfig overrides on the trainer's defaults) and its defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Variant:
    """A GRPOConfig override set and what it is."""

    overrides: dict[str, Any]
    what: str
    min_G: int = 2
    target: str = "J"  # the objective whose gradient the variant is built to estimate (also measured against)


PASS_K = 4


# The advantage-mode variants use dr_grpo's constant normaliser (B * max_completion_length, no std), so that they
# differ from dr_grpo only in their advantages. (The sweep study's "rloo" and "reinforce" keep the trainer's default
# dapo normaliser.)
VARIANTS: dict[str, Variant] = {
    "grpo": Variant(
        {"loss_type": "grpo"}, "group z-score advantages, per-sequence token mean (Shao et al. 2024)"
    ),
    "dr_grpo": Variant(
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "group-mean baseline without the std, token sum / B*T (Dr. GRPO, Liu et al. 2025)",
    ),
    "dapo": Variant(
        {"loss_type": "dapo"},
        "the trainer's default: z-score advantages, token sum / the batch's tokens (DAPO)",
    ),
    "bnpo": Variant({"loss_type": "bnpo"}, "z-score advantages, token sum / the mini-batch's tokens (BNPO)"),
    "rloo": Variant(
        {"advantage_mode": "rloo", "loss_type": "dr_grpo"},
        "leave-one-out baseline, token sum / B*T (RLOO, Ahmadian et al. 2024)",
    ),
    "reinforce": Variant(
        {"advantage_mode": "reinforce", "loss_type": "dr_grpo"}, "raw reward, no baseline, token sum / B*T"
    ),
    "cispo": Variant(
        {"loss_type": "cispo", "epsilon_high": 5.0},
        "detached importance weight capped at 5 times log pi, dapo's normaliser (CISPO, MiniMax-M1)",
    ),
    "gspo": Variant(
        {"loss_type": "grpo", "importance_sampling_level": "sequence"},
        "length-normalised sequence ratio, grpo's aggregation (GSPO, Zheng et al. 2025; TRL's pairing)",
    ),
    "sapo": Variant(
        {"loss_type": "sapo"}, "soft sigmoid gate on the ratio, per-sequence mean (SAPO, Gao et al. 2025)"
    ),
    "gmpo": Variant(
        {"loss_type": "gmpo"}, "geometric mean of the token ratios, per-sequence (GMPO, Zhao et al. 2025)"
    ),
    "opo": Variant(
        {"advantage_mode": "opo", "loss_type": "dr_grpo"},
        "length-weighted group-mean baseline, token sum / B*T (OPO, Hao et al. 2025)",
    ),
    "reinforce_pp_baseline": Variant(
        {"advantage_mode": "reinforce_pp_baseline", "loss_type": "dr_grpo"},
        "group mean subtracted, then whitened over the batch's tokens, token sum / B*T (REINFORCE++-baseline)",
    ),
    "pass_at_k": Variant(
        {"advantage_mode": "pass_at_k", "train_pass_k": PASS_K, "loss_type": "dr_grpo"},
        "the pass@4 objective's advantages, token sum / B*T (Chen et al. 2025); G > 4 only (at G = k every "
        "group's pass@k estimate is 0 or 1: no signal)",
        min_G=PASS_K + 1,
        target="pass@k",
    ),
}
DEFAULT_G = [2, 4, 8, 16, 32]
DEFAULT_BATCHES = 200
DEFAULT_PROMPTS = 12
DEFAULT_RANGE = (0.05, 0.95)
MID_STEPS = 60
MAX_COMPLETION_LENGTH = 4
POLICIES = ("reference", "mid")
