"""transformers' TrainerCallbacks in a GRPO run: the hooks in TRL's order with transformers' own args, state and
control; EarlyStoppingCallback stopping a run cleanly; TensorBoardCallback writing what it writes in a Trainer."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from _runs import LAUNCH_ENV, REPO, TWO_CPU_PROCESSES
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


def test_an_unset_greater_is_better_ranks_a_higher_accuracy_as_the_best(tmp_path):
    """greater_is_better left unset (None) reads as transformers' TrainingArguments reads it for a metric that does
    not end in "loss": larger is better. Evaluations whose accuracy rises, then falls, keep the highest one as
    state.best_metric and its step as best_global_step (read as lower-is-better, the first, lowest, would stay)."""
    from tinygrpo.run.callbacks import Callbacks
    from tinygrpo.run.config import LoggingConfig
    from tinygrpo.run.trainer import build_accelerator

    build_accelerator(str(tmp_path), "none")  # (the accelerate state the run's TrainingArguments read)
    cfg = GRPOConfig(output_dir=str(tmp_path), max_steps=6, metric_for_best_model="accuracy")
    assert cfg.greater_is_better is None
    callbacks = Callbacks([TrainerCallback()], LoggingConfig.of(cfg), 6, cfg.training_arguments, True)
    assert callbacks.args.greater_is_better is True  # (transformers' own reading of the unset option)
    for step, accuracy in ((2, 0.25), (4, 0.75), (6, 0.5)):
        callbacks.evaluate(step, {"eval/accuracy": accuracy, "reward": 1.0 - accuracy})
    assert callbacks.state.best_metric == 0.75
    assert callbacks.state.best_global_step == 4
    lower = Callbacks(
        [TrainerCallback()],
        LoggingConfig.of(replace(cfg, metric_for_best_model="loss")),
        6,
        cfg.training_arguments,
        True,
    )
    assert (
        lower.greater is False
    )  # (a name ending in "loss", unset: lower is better, as transformers reads it)


class LogHistorySeen(TrainerCallback):
    """At each on_log: the length of state.log_history and its last entry, beside the logs the hook was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, dict, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.seen.append((len(state.log_history), dict(state.log_history[-1]), dict(logs)))


def test_state_log_history_grows_with_every_logged_row(seed_reference, tmp_path):
    """As in a Trainer, each logged row is appended to state.log_history (transformers' names, with its step) before
    on_log is called: a callback sees the history grow by one at each log, its last entry the logs it was given,
    and at the end the history holds every row of metrics.jsonl."""
    seen = LogHistorySeen()
    trainer = _trainer(seed_reference, tmp_path / "run", [seen])
    trainer.train()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert [n for n, _, _ in seen.seen] == list(range(1, len(rows) + 1))  # one more entry at each log
    for (_, last, logs), row in zip(seen.seen, rows, strict=True):
        assert last == {**logs, "step": row["step"]}
        assert logs == transformers_names({k: v for k, v in row.items() if k != "step"})
    assert "eval_accuracy" in seen.seen[0][1] and "reward" in seen.seen[1][1]
    assert trainer.callbacks.state.log_history == [last for _, last, _ in seen.seen]


class StopsAt(TrainerCallback):
    """Asks for a stop from one hook, at one step."""

    def __init__(self, hook: str, step: int) -> None:
        self.hook, self.step = hook, step

    def __getattribute__(self, name):
        if name.startswith("on_") and name == object.__getattribute__(self, "hook"):
            return self._stop
        return super().__getattribute__(name)

    def _stop(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


@pytest.mark.parametrize("hook", ["on_step_end", "on_evaluate", "on_log"])
def test_a_run_stopped_from_any_hook_ends_with_its_held_out_evaluation(seed_reference, tmp_path, hook):
    """should_training_stop asked at step 3 of 8 (evaluations every 2 steps: step 3 is not one) from on_step_end, or
    at step 2 (an evaluation step) from on_evaluate or on_log, after the step's evaluation point: the run ends at that
    step with a held-out evaluation of it in summary.json's eval_after and as the last row of metrics.jsonl, as a run
    that reaches max_steps does."""
    at = 3 if hook == "on_step_end" else 2
    out = tmp_path / "run"
    summary = _trainer(seed_reference, out, [StopsAt(hook, at)], max_steps=8, save_steps=0).train()
    assert summary["steps"] == at and summary["stopped_by_callback"]
    assert "eval/accuracy" in summary["eval_after"]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == at and rows[-1]["eval/accuracy"] == summary["eval_after"]["eval/accuracy"]


def test_a_stop_asked_at_a_step_without_an_evaluation_from_on_log_still_ends_evaluated(
    seed_reference, tmp_path
):
    """on_log asks for the stop at step 3, which logs (logging_steps 1) but does not evaluate (eval_steps 2): the run
    evaluates step 3 before it ends, and logs that evaluation at step 3."""
    out = tmp_path / "run"
    summary = _trainer(seed_reference, out, [StopsAt("on_log", 3)], max_steps=8, save_steps=0).train()
    assert summary["steps"] == 3 and "eval/accuracy" in summary["eval_after"]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/accuracy" in r] == [0, 2, 3]
    assert rows[-1]["step"] == 3


# A run on two processes whose callback asks for a stop on rank 1 alone: each process writes where it stopped.
_STOP_ON_RANK_1 = """
import json, sys
sys.path.insert(0, {repo!r})
from transformers import TrainerCallback
from tinygrpo.data.problems import load_split
from tinygrpo.run.config import GRPOConfig
from tinygrpo.run.launch import load_model_and_tokenizer
from tinygrpo.run.trainer import GRPOTrainer


class StopOnRank1(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero and state.global_step == 2:
            control.should_training_stop = True


model, tok = load_model_and_tokenizer({ref!r}, "model_name_or_path")
cfg = GRPOConfig(output_dir={out!r}, dataset_name="seed_bank", dataset_test_split="train",
                 allow_overlapping_splits=True, num_generations=4, per_device_train_batch_size=16,
                 max_completion_length=3, disable_tqdm=True, make_plots=False, dynamic_sampling=False,
                 explore_rounds=0, signal_forecast_prompts=0, torch_num_threads=1, logging_steps=1,
                 eval_steps=3, save_steps=0, max_steps=6)
split = load_split("seed_bank", "train")
trainer = GRPOTrainer(cfg, model, tok, split, eval_dataset=split, callbacks=[StopOnRank1()])
summary = trainer.train()
rank = trainer.procs.rank
with open({out!r} + f"/rank{{rank}}.json", "w") as f:
    json.dump({{"step": trainer.step, "stopped_by_callback": summary["stopped_by_callback"],
               "eval_after": summary["eval_after"]}}, f)
"""


@pytest.mark.slow
def test_a_stop_asked_on_one_process_stops_every_process_at_that_step(seed_reference, tmp_path):
    """should_training_stop set by a callback on rank 1 only, after step 2 of 6 (not an evaluation step): both
    processes stop after step 2 (no process left waiting at a collective of step 3), and the run ends cleanly as a
    stopped run does on one process: exit code 0, both report step 2 and the stop, the final files written, the
    last row of metrics.jsonl step 2 with its held-out evaluation."""
    out = tmp_path / "run"
    script = tmp_path / "stop_on_rank_1.py"
    script.write_text(_STOP_ON_RANK_1.format(repo=str(REPO), ref=seed_reference, out=str(out)))
    proc = subprocess.run(
        [*TWO_CPU_PROCESSES, str(script)],
        cwd=REPO,
        env=LAUNCH_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["step"] for r in ranks] == [2, 2]
    assert all(r["stopped_by_callback"] for r in ranks)
    assert "eval/accuracy" in ranks[0]["eval_after"]  # (evaluated at the step it stopped, as on one process)
    for name in ("final/config.json", "summary.json", "checkpoint-2"):
        assert (out / name).exists(), name
    assert json.loads((out / "summary.json").read_text())["stopped_by_callback"]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 2 and "eval/accuracy" in rows[-1]
