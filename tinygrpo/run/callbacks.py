"""Callbacks with transformers' interface: a `TrainerCallback` (transformers' `EarlyStoppingCallback`, a tracker's
callback, a user's own hook) plugs into GRPOTrainer as it plugs into TRL's.

The trainer calls the hooks where transformers' Trainer (and so TRL's GRPOTrainer) calls them: `on_init_end` when it
is built, `on_train_begin`, `on_step_begin` and `on_step_end` around each step, `on_log` with each row of
metrics.jsonl, `on_evaluate` after each held-out evaluation, `on_save` after each checkpoint, `on_train_end` at the
end. Each hook gets the three objects transformers passes, its own classes:

- `args`: a `transformers.TrainingArguments` built from the run's GRPOConfig (output_dir, max_steps, logging, eval and
  save steps, learning rate, seed, run_name, metric_for_best_model, greater_is_better; eval_strategy "steps" when
  the run evaluates);
- `state`: a `transformers.TrainerState`: global_step, max_steps, log_history, best_metric and best_global_step
  (kept as Trainer keeps them when metric_for_best_model is set), is_world_process_zero;
- `control`: a `transformers.TrainerControl`. `should_training_stop` set by any hook stops the run after that step:
  cleanly, as a run that reached max_steps ends (a final checkpoint, final/, the report, summary.json).

The metrics a hook sees carry transformers' names: a held-out evaluation's `eval/accuracy` is `eval_accuracy`, so
`metric_for_best_model="accuracy"` names it as it would in a Trainer. Not supported: `should_evaluate`,
`should_save` and `should_log` set by a hook (the run's own steps decide those), `on_epoch_*` (a GRPO run counts
steps), `on_substep_end`, `on_pre_optimizer_step`, `on_optimizer_step` and `on_prediction_step`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tinygrpo.run.config import LoggingConfig

HOOKS = (
    "on_init_end",
    "on_train_begin",
    "on_step_begin",
    "on_step_end",
    "on_log",
    "on_evaluate",
    "on_save",
    "on_train_end",
)


def transformers_names(metrics: dict[str, float]) -> dict[str, float]:
    """Our metric names as transformers' Trainer writes them: `eval/accuracy` -> `eval_accuracy` (a held-out
    evaluation's prefix is `eval_`); the others keep theirs."""
    return {(f"eval_{k[5:]}" if k.startswith("eval/") else k): v for k, v in metrics.items()}


class Callbacks:
    """The run's callbacks and the state they read and set (see the module docstring)."""

    def __init__(
        self,
        callbacks: Sequence[Any],
        logging: LoggingConfig,
        max_steps: int,
        args: Callable[[], Any],
        is_main: bool,
        **objects: Any,
    ) -> None:
        """`args`: the run's `transformers.TrainingArguments`, built when there is a callback to read them
        (GRPOConfig.training_arguments)."""
        from transformers import TrainerControl, TrainerState

        self.callbacks = [
            cb() if isinstance(cb, type) else cb for cb in callbacks
        ]  # (a class, as Trainer takes)
        self.args = args() if self.callbacks else None
        self.state = TrainerState(
            max_steps=max_steps,
            logging_steps=logging.logging_steps,
            eval_steps=logging.eval_steps,
            save_steps=logging.save_steps,
            is_local_process_zero=is_main,
            is_world_process_zero=is_main,
        )
        self.control = TrainerControl()
        self.objects = objects  # model, processing_class, optimizer, lr_scheduler: passed to every hook
        self.metric = logging.metric_for_best_model
        self.greater = logging.greater_is_better
        if (
            self.greater is None
        ):  # (as TrainingArguments reads it unset: a loss is better lower, the rest higher)
            self.greater = not (self.metric or "").endswith("loss")
        if self.metric and not self.metric.startswith("eval_"):
            self.metric = f"eval_{self.metric}"

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    @property
    def should_stop(self) -> bool:
        return self.control.should_training_stop

    def agreed_stop(self, on_any_process: Callable[[bool], bool]) -> bool:
        """should_training_stop, asked by a callback on any process, set on every process: all of them then
        evaluate, log and end this step as a stopped run does (a stop read on one process alone would leave the
        others at the next step's collectives, and end the run as interrupted there)."""
        if self.callbacks and on_any_process(self.should_stop):
            self.control.should_training_stop = True
        return self.should_stop

    def event(self, hook: str, step: int, **kwargs: Any) -> None:
        """Call `hook` on every callback, in order, as transformers' CallbackHandler does (a hook that returns a
        TrainerControl replaces the one the next hook sees)."""
        if not self.callbacks:
            return
        self.state.global_step = step
        for cb in self.callbacks:
            out = getattr(cb, hook)(self.args, self.state, self.control, **self.objects, **kwargs)
            if out is not None:
                self.control = out

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.callbacks:
            logs = transformers_names(metrics)
            self.state.log_history.append({**logs, "step": step})
            self.event("on_log", step, logs=logs)

    def evaluate(self, step: int, metrics: dict[str, float]) -> None:
        """After a held-out evaluation: on_evaluate, then the best metric so far, in Trainer's order (its hooks see
        the best of the evaluations before this one)."""
        if not self.callbacks:
            return
        named = transformers_names({k: v for k, v in metrics.items() if k.startswith("eval/")})
        self.event("on_evaluate", step, metrics=named)
        value = named.get(self.metric) if self.metric else None
        if value is not None and math.isfinite(value):
            best = self.state.best_metric
            if best is None or (value > best if self.greater else value < best):
                self.state.best_metric, self.state.best_global_step = value, step
