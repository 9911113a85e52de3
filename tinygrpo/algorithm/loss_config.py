"""LossConfig: the settings the loss reads, and nothing else, frozen and built once from a run's config.

`grpo_loss`, the registered policy losses and the entropy-bonus controller read these fields only; the other ~70
fields of `GRPOConfig` (data, sampling, logging, checkpoints) never reach the loss. Names and meanings are
GRPOConfig's (TRL's where TRL has the concept); see its help texts for the papers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class LossConfig:
    # the policy loss (tinygrpo.algorithm.policy_losses.POLICY_LOSSES) and its options
    loss_type: str
    temperature: float  # the log-probs are taken at the sampling temperature
    epsilon: float
    epsilon_high: float | None
    delta: float | None
    importance_sampling_level: str
    sapo_temperature_pos: float
    sapo_temperature_neg: float
    vespo_k_pos: float
    vespo_lambda_pos: float
    vespo_k_neg: float
    vespo_lambda_neg: float
    max_completion_length: int  # dr_grpo's constant normaliser
    # token and sequence masks, and the explore rounds' importance weights
    off_policy_mask_threshold: float | None
    top_entropy_quantile: float
    explore_importance_sampling_correction: bool
    explore_importance_sampling_clip_max: float
    # the KL term
    beta: float
    kl_in_loss: bool  # beta > 0 and the KL is not in the reward instead
    kl_estimator: str
    use_bias_correction_kl: bool
    # the entropy bonus and its adaptive control
    entropy_bonus: bool  # an entropy term is in the loss
    use_adaptive_entropy: bool
    entropy_target: float
    entropy_coef_delta: float
    entropy_coef_min: float
    entropy_coef_max: float

    @classmethod
    def from_config(cls, cfg: object) -> LossConfig:
        """The loss's fields of a GRPOConfig (or of anything with those attributes)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})
