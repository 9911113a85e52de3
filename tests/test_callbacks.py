"""transformers' TrainerCallbacks in a GRPO run: the hooks in TRL's order with transformers' own args, state and
control; EarlyStoppingCallback stopping a run cleanly; TensorBoardCallback writing what it writes in a Trainer."""

from __future__ import annotations

import json

import pytest
from transformers import EarlyStoppingCallback, TrainerCallback, TrainingArguments
from transformers.trainer_callback import TrainerControl, TrainerState

from tinygrpo.data.problems import load_split
from tinygrpo.run.callbacks import transformers_names
from tinygrpo.run.config import GRPOConfig
from tinygrpo.run.launch import load_model_and_tokenizer
from tinygrpo.run.trainer import GRPOTrainer

pytestmark = pytest.mark.slow  # (GRPO runs of a few steps, about a second each)


def _trainer(seed_reference, out, callbacks, **overrides) -> GRPOTrainer:
    model, tok = load_model_and_tokenizer(seed_reference, "model_name_or_path")
    cfg = GRPOConfig(
        **{
            "output_dir": str(out),
            "dataset_name": "seed_bank",
            "dataset_test_split": "train",
            "allow_overlapping_splits": True,
            "num_generations": 4,
            "per_device_train_batch_size": 32,
            "max_completion_length": 3,
            "disable_tqdm": True,
            "make_plots": False,
            "dynamic_sampling": False,
            "explore_rounds": 0,
            "signal_forecast_prompts": 0,
            "logging_steps": 1,
            "eval_steps": 2,
            "save_steps": 2,
            "max_steps": 4,
            **overrides,
        }
    )
    split = load_split("seed_bank", "train")
    return GRPOTrainer(cfg, model, tok, split, eval_dataset=split, callbacks=callbacks)


class Recorder(TrainerCallback):
    """Every hook it is called on, with the step and what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.seen: dict[str, object] = {}

    def _record(self, hook, args, state, control, **kw):
        assert isinstance(args, TrainingArguments) and isinstance(state, TrainerState)
        assert isinstance(control, TrainerControl)
        assert {"model", "processing_class", "optimizer", "lr_scheduler"} <= set(kw)
        self.calls.append((hook, state.global_step))
        self.seen[hook] = kw.get("metrics") or kw.get("logs")

    def __getattribute__(self, name):
        if name.startswith("on_"):
            return lambda *a, **kw: self._record(name, *a, **kw)
        return super().__getattribute__(name)


def test_the_hooks_come_in_trls_order_with_transformers_objects(seed_reference, tmp_path):
    rec = Recorder()
    summary = _trainer(seed_reference, tmp_path / "run", [rec]).train()
    hooks = [h for h, _ in rec.calls]
    assert hooks[:2] == ["on_init_end", "on_train_begin"] and hooks[-1] == "on_train_end"
    step2 = [h for h, s in rec.calls if s == 2]
    # (TRL's order within a step: its end, then evaluate, log and save)
    assert step2 == ["on_step_end", "on_evaluate", "on_log", "on_save", "on_step_begin"]
    assert [s for h, s in rec.calls if h == "on_evaluate"] == [2, 4]
    assert [s for h, s in rec.calls if h == "on_save"] == [2, 4]  # (step 4: the run's last checkpoint)
    assert "eval_accuracy" in rec.seen["on_evaluate"] and "eval/accuracy" not in rec.seen["on_evaluate"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rec.seen["on_log"] == transformers_names({k: v for k, v in rows[-1].items() if k != "step"})
    assert not summary["stopped_by_callback"]


class StopAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


@pytest.mark.parametrize(
    "callback,stop",
    [
        # no improvement at the second evaluation: the model does not move (a learning rate of 1e-12)
        (lambda: EarlyStoppingCallback(early_stopping_patience=1), 4),
        (lambda: StopAt(3), 3),  # a user's hook, between evaluations: the run evaluates at the step it stops
    ],
    ids=["early_stopping", "should_training_stop"],
)
def test_a_callbacks_stop_ends_the_run_cleanly(seed_reference, tmp_path, callback, stop):
    out = tmp_path / "run"
    cb = callback()
    trainer = _trainer(
        seed_reference, out, [cb], max_steps=20, learning_rate=1e-12, metric_for_best_model="accuracy"
    )
    summary = trainer.train()
    assert summary["stopped_by_callback"] and summary["steps"] == stop and trainer.step == stop
    assert "eval/accuracy" in summary["eval_after"]
    for name in ("final/config.json", "report.html", "summary.json", f"checkpoint-{stop}"):
        assert (out / name).exists(), name
    assert json.loads((out / "summary.json").read_text())["stopped_by_callback"]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == stop
    if isinstance(cb, EarlyStoppingCallback):
        assert cb.early_stopping_patience_counter == 1
        assert trainer.callbacks.state.best_metric == rows[-1]["eval/accuracy"]
        assert trainer.callbacks.state.best_global_step == 2


def test_transformers_tensorboard_callback_writes_the_runs_rows(seed_reference, tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers.integrations import TensorBoardCallback

    out = tmp_path / "run"
    logs = tmp_path / "tb"
    monkeypatch.setenv(
        "TENSORBOARD_LOGGING_DIR", str(logs)
    )  # (where transformers 5 writes; 4.x reads the args')
    trainer = _trainer(seed_reference, out, [TensorBoardCallback()])
    trainer.callbacks.args.logging_dir = str(logs)
    trainer.train()
    events = EventAccumulator(str(logs))
    events.Reload()
    tags = events.Tags()["scalars"]
    # (its own renaming, as in a Trainer: eval_accuracy -> eval/accuracy, reward -> train/reward)
    assert "eval/accuracy" in tags and "train/reward" in tags, tags
    assert [e.step for e in events.Scalars("eval/accuracy")] == [
        0,
        2,
        4,
    ]  # (step 0: the evaluation before training)
