"""What the rollout reads of a run's options: the fields and properties of GRPOConfig (tinygrpo/run/config.py) of
these names, each documented there with its paper. A component of the rollout gets this, not the whole config."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class RolloutConfig:
    seed: int
    num_generations: int  # G
    unit: int  # completions per prompt row: G, or allocation_unit when prompts get whole units of it
    generation_size: int  # completions each process samples per generation, before refills
    max_completion_length: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    static_shapes: bool | None  # None: on for CUDA
    mask_truncated_completions: bool
    beta: float  # (the KL in the reward, with use_kl_in_reward)
    advantage_mode: str
    scale_rewards: str
    train_pass_k: int
    multi_objective_aggregation: str
    explore_rounds: int
    explore_temperatures: list[float]
    dynamic_sampling: bool
    max_dynamic_sampling_rounds: int
    sample_allocation: str
    max_num_generations: int
    screen_hard_below: float

    @classmethod
    def of(cls, cfg: object) -> RolloutConfig:
        """These fields of a GRPOConfig (or of anything with these attributes); a RolloutConfig as it is."""
        if isinstance(cfg, RolloutConfig):
            return cfg
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})
