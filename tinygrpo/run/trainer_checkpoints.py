"""GRPOTrainer's checkpoints: which components' state a checkpoint holds, saving it (never non-finite weights) and
loading it back (tinygrpo/run/checkpoint.py writes and reads the files)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run import launch
from tinygrpo.update.policy_update import NonFiniteError, nonfinite_weight


class Checkpoints:
    """The checkpoint methods of GRPOTrainer (a mixin: they read the trainer's components)."""

    def checkpoint_parts(self) -> dict:
        """The components whose state a checkpoint holds, by name: shared (the same on every process), per process,
        and the extra models."""
        synced = self.ref_model is not None and self.cfg.sync_ref_model
        return {
            "shared": {"trainer": self.state, "optimizer_step": self.optim, "policy_update": self.update},
            "per_process": {"batch_generator": self.generator},
            "models": {"ref_model": self.ref_model} if synced else {},
        }

    def save_checkpoint(self) -> Path:
        """checkpoint-<step> (tinygrpo/run/checkpoint.py): accelerate's state (model, optimizer, RNGs), every component's
        state, the settings and a manifest; written under a temporary name, then renamed. Non-finite weights are
        never saved."""
        bad = nonfinite_weight(self.model)
        if bad is not None:
            raise NonFiniteError(
                f"step {self.step}: the weights are NaN or infinite ({bad}; a learning rate too large?); not saved "
                f"({ckpt.last_checkpoint(self.out, resume=True)})"
            )
        path = ckpt.save_checkpoint(
            self.out,
            self.step,
            self.acc,
            self.procs,
            **self.checkpoint_parts(),
            config=asdict(self.cfg),
            keep=self.cfg.save_total_limit,
        )
        self.callbacks.event("on_save", self.step)
        return path

    def load_checkpoint(self, path: Path) -> None:
        """Restore a checkpoint into every component (a caller of train() may not have checked its settings, as
        train_grpo.py does first: they are checked here too)."""
        ckpt.load_checkpoint(
            path,
            self.acc,
            self.procs,
            **self.checkpoint_parts(),
            check_config=lambda saved: launch.check_same_run(saved, self.cfg, path),
        )
