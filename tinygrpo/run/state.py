"""The trainer's typed hand-offs: what one training step returns, and the loop's own counters (checkpointed)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tinygrpo.rollout.round import ScoredBatch
from tinygrpo.run.run_logs import StepTokens


@dataclass
class StepOutput:
    """What one training step returns: its metrics (global), what it sampled, and (main process, at a step that logs
    completions) what its update did to the logged completions' tokens."""

    metrics: dict[str, float]
    scored: ScoredBatch
    tokens: StepTokens | None = None


@dataclass
class TrainerState:
    """The loop's own counters (the components' state is theirs: see GRPOTrainer.checkpoint_parts)."""

    step: int = 0
    total_completions: int = 0  # sampled in every round, over all processes
    nonfinite_skipped: int = 0  # updates skipped for a NaN/inf loss or gradient (on_nonfinite="skip")
    nonfinite_steps: int = (
        0  # steps that made no update, every one of theirs being NaN/inf (on_nonfinite="skip")
    )
    elapsed_seconds: float = 0.0  # wall-clock seconds in training steps (evaluation and checkpoints excluded)

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


def crossed(step: int, k: int, every: int) -> bool:
    """Whether the k optimizer steps that ended at `step` passed a multiple of `every` (logging_steps, eval_steps,
    save_steps count optimizer steps, as in TRL; a generation makes k of them: with k = 1, step % every == 0)."""
    return step // every > (step - k) // every
