"""GRPOTrainer: one training step, the loop around it (evaluation, logging, checkpoints), and its set-up.

One step reads top to bottom in `training_step`:

    generate    rollout.sample_round()      the next prompts, G completions of each   (tinygrpo/rollout/)
    score       rollout.score(round)        each completion's rewards
    advantages  rollout.advantages(round)   group-relative, over the global batch
    [refill     rollout.refill(round)       explore rounds, dynamic sampling: variants, off for plain GRPO]
    update      update.prepare(batch)       reference / old log-probs of the groups that are run  (tinygrpo/update/)
                update.run(minibatches)     num_iterations x mini-batches: grpo_loss -> backward -> clip -> AdamW
    metrics     step_metrics(...)           the step's row of metrics.jsonl

The math of every arrow is a pure function in tinygrpo/algorithm/ (nano_grpo.py writes the plain one out). The
trainer holds the run's GRPOConfig (TRL's `trainer.args`) and hands each component its option group. Runs on one
process or many (`accelerate launch`): each process holds whole groups, rewards are gathered so advantages are
computed on the global batch, and DDP averages the gradients.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed

from rewards import RewardError, resolve_rewards
from tinygrpo.algorithm.advantage_estimators import AdvantageConfig
from tinygrpo.algorithm.policy_losses import LossConfig
from tinygrpo.base.processes import Processes
from tinygrpo.data.verifier import Verifier
from tinygrpo.model.backend import AutocastBackend, PolicyForward, select_backend
from tinygrpo.model.static_shapes import static_backend, static_shapes_on
from tinygrpo.rollout.config import RolloutConfig, SamplingParams
from tinygrpo.rollout.evaluation import HeldOutEvaluator
from tinygrpo.rollout.generation import BatchGenerator, RewardFailure, ScoredBatch, reward_spec
from tinygrpo.rollout.prompts import PromptSource, PromptStats
from tinygrpo.rollout.tool_calls import tool_use
from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run.callbacks import Callbacks
from tinygrpo.run.checkpoint import TrainerState, write_run_end
from tinygrpo.run.config import GRPOConfig, LoggingConfig, ModelConfig, RunConfig, report_trackers
from tinygrpo.run.logs import (
    ProgressBar,
    RunLogs,
    StepTokens,
    TokenProbs,
    logged_rows,
    token_probs,
    token_texts,
)
from tinygrpo.run.metrics import StepTimes, answer_metrics, step_metrics
from tinygrpo.run.signals import StopOnSignal
from tinygrpo.run.validation import check_inputs
from tinygrpo.run.watch import LearningWatch, forecast_before_training, target_lengths
from tinygrpo.update.config import BatchConfig, OptimizerConfig
from tinygrpo.update.optim import OptimizerStep, build_optimizer
from tinygrpo.update.policy_update import NonFiniteError, PolicyUpdate, mix_reference, nonfinite_weight


@dataclass
class StepOutput:
    """What one training step returns: its metrics (global), what it sampled, and (main process, at a step that logs
    completions) what its update did to the logged completions' tokens."""

    metrics: dict[str, float]
    scored: ScoredBatch
    tokens: StepTokens | None = None


def crossed(step: int, k: int, every: int) -> bool:
    """Whether the k optimizer steps that ended at `step` passed a multiple of `every` (logging_steps, eval_steps,
    save_steps count optimizer steps, as in TRL; a generation makes k of them: with k = 1, step % every == 0)."""
    return step // every > (step - k) // every


def build_accelerator(output_dir: str, report_to: str) -> Accelerator:
    """The run's Accelerator (the one place that builds it): the CPU unless a GPU is there; the trackers report_to
    names."""
    log_with = report_trackers(report_to) or None
    return Accelerator(cpu=not torch.cuda.is_available(), log_with=log_with, project_dir=output_dir)


class GRPOTrainer:
    def __init__(
        self,
        config: GRPOConfig,
        model: nn.Module,
        tokenizer,
        train_dataset,
        eval_dataset=None,
        ref_model: nn.Module | None = None,
        reward_funcs: list | None = None,
        accelerator: Accelerator | None = None,
        callbacks: list | None = None,
    ) -> None:
        self.cfg = cfg = config
        self.acc = accelerator or build_accelerator(cfg.output_dir, cfg.report_to)
        self.procs = procs = Processes(self.acc)
        if cfg.max_steps is None:  # num_train_epochs: the run's length from the training split's size
            cfg.resolve_length(len(train_dataset), procs.num, cfg.unit)
        self.tokenizer, self.train_dataset, self.out = tokenizer, train_dataset, Path(cfg.output_dir)
        if procs.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
        if cfg.torch_num_threads or procs.num > 1:
            torch.set_num_threads(cfg.torch_num_threads or max(1, (os.cpu_count() or 1) // procs.num))
        # Each component is handed the option groups it reads, never the whole config.
        self.sampling, rollout, batches = SamplingParams.of(cfg), RolloutConfig.of(cfg), BatchConfig.of(cfg)
        self._check(model, tokenizer, train_dataset, eval_dataset, reward_funcs, rollout, batches)
        self.prompt_stats = PromptStats(len(train_dataset), cfg.pass_rate_ema)
        sampler = (cfg.prompt_sampler, cfg.prompt_sampler_floor, self.prompt_stats, cfg.shuffle_dataset)
        self.prompts = PromptSource(train_dataset, tokenizer, cfg.seed, *sampler)
        set_seed(cfg.seed)
        self._models(model, ref_model, ModelConfig.of(cfg))
        self.tools = tool_use(rollout, tokenizer)
        self.evaluator = self._evaluator(eval_dataset)
        self.k = k = (
            cfg.updates_per_generation
        )  # optimizer steps a generation makes: what `step` counts (TRL's)
        optimizer, scheduler = build_optimizer(self.model, OptimizerConfig.of(cfg), cfg.max_steps, k)
        policy, optimizer = self.acc.prepare(PolicyForward(self.model, self.backend), optimizer)
        policy.train()
        self.optim = OptimizerStep(policy, optimizer, scheduler, self.acc)
        self._components(rollout, batches, policy)
        self.state, self.logs = TrainerState(), RunLogs(self.out, enabled=procs.is_main)
        target, lengths = target_lengths(self.prompts.columns, cfg.task, cfg.dataset_name)
        self.watch = LearningWatch(cfg.max_completion_length, cfg.num_generations, lengths, target)
        # transformers' TrainerCallbacks, called where TRL calls them (tinygrpo/run/callbacks.py)
        objects = dict(
            model=self.model, processing_class=tokenizer, optimizer=optimizer, lr_scheduler=scheduler
        )
        args = (LoggingConfig.of(cfg), cfg.max_steps, cfg.training_arguments, procs.is_main)
        self.callbacks = Callbacks(callbacks or [], *args, **objects)
        self.callbacks.event("on_init_end", 0)

    def _check(self, model, tokenizer, train_dataset, eval_dataset, reward_funcs, rollout, batches) -> None:
        """The rewards resolved; data, model and rewards checked on real rows first (tinygrpo/run/validation.py)."""
        cfg = self.cfg
        funcs = reward_funcs if reward_funcs is not None else cfg.reward_funcs
        resolved = resolve_rewards(funcs, cfg.reward_weights)
        self.rewards = reward_spec(*resolved, cfg.max_completion_length, tokenizer)
        data = (model, tokenizer, train_dataset, eval_dataset, self.rewards, self.acc.device)
        groups = (
            ModelConfig.of(cfg),
            batches,
            self.sampling,
            rollout,
            AdvantageConfig.of(cfg),
            cfg.eval_pass_k,
        )
        check_inputs(*groups, *data)

    def _evaluator(self, eval_dataset) -> HeldOutEvaluator:
        """The held-out evaluation, under the task's verifier, with pass@k at the run's sampling settings."""
        cfg = self.cfg
        rows = eval_dataset.to_dict() if eval_dataset is not None else None
        verifier = Verifier.of(cfg.dataset_name, cfg.eval_reward, cfg.task, self.rewards.kwargs["eos"])
        sampled = cfg.num_generations_eval is not None
        pass_k = (cfg.seed, cfg.eval_pass_k, sampled, self.tools)
        return HeldOutEvaluator(rows, self.tokenizer, self.backend, self.sampling, verifier, *pass_k)

    def _models(self, model: nn.Module, ref_model: nn.Module | None, m: ModelConfig) -> None:
        """The policy and the reference (beta > 0 only) in the run's dtype, and one way of running them, decided
        once: FSDP shards the parameters the grouped fast path reads; static shapes (CUDA) score on a few shapes."""
        dtype = getattr(torch, m.dtype)
        self.model = model.to(dtype)  # (float32: the model itself, unchanged)
        self.ref_model = ref_model.to(dtype) if ref_model is not None and self.cfg.needs_reference else None
        if self.ref_model is not None:
            self.ref_model.eval().requires_grad_(False).to(self.acc.device)
        fsdp = self.acc.distributed_type == DistributedType.FSDP
        self.backend = select_backend(
            self.model, self.ref_model, prefer_grouped=m.grouped_forward and not fsdp
        )
        self.static = static_shapes_on(m.static_shapes, self.acc.device)
        if self.static:
            self.backend = static_backend(
                self.backend, self.sampling.max_completion_length, m.cuda_graphs, self.procs.num == 1
            )
        if m.bf16:
            self.backend = AutocastBackend(self.backend, self.acc.device.type)

    def _components(self, rollout: RolloutConfig, batches: BatchConfig, policy) -> None:
        """The rollout and the update: the KL to the reference goes in the reward (use_kl_in_reward) or in the loss."""
        cfg, loss, advantages = self.cfg, LossConfig.of(self.cfg), AdvantageConfig.of(self.cfg)
        self.generator = BatchGenerator(
            rollout,
            self.sampling,
            advantages,
            self.model,
            self.backend,
            self.tokenizer,
            self.prompts,
            self.rewards,
            self.procs,
            seed=cfg.seed,
            generation_size=batches.generation_size,
            stats=self.prompt_stats,
            ref_model=self.ref_model if loss.use_kl_in_reward else None,
            beta=loss.beta,
            tools=self.tools,
            static=self.static,
        )
        ref = self.ref_model if loss.kl_in_loss else None
        optimizer_cfg = OptimizerConfig.of(cfg)
        self.update = PolicyUpdate(
            loss,
            self.sampling,
            batches,
            optimizer_cfg,
            rollout.unit,
            policy,
            self.model,
            ref,
            self.backend,
            self.optim,
            self.procs,
        )

    @property
    def step(self) -> int:
        return self.state.step

    args = property(lambda self: self.cfg, doc="The run's GRPOConfig (TRL's trainer.args).")
    processing_class = property(lambda self: self.tokenizer, doc="The tokenizer (TRL's processing_class).")

    # ------------------------------------------------------------------ one step
    def training_step(self) -> StepOutput:
        """Generate, score, compute advantages, optimize; advances `step`; returns the step's metrics."""
        cfg, state, rollout = self.cfg, self.state, self.generator
        t0 = time.perf_counter()
        try:
            sampled = rollout.sample_round()  # generate: the next prompts, G completions of each
            rollout.score(sampled)  # score: each completion's rewards (TRL's reward functions)
            rollout.advantages(sampled)  # advantages: group-relative, over the global batch
            scored = rollout.refill(sampled)  # (explore rounds, dynamic sampling: variants)
        except RewardFailure as e:
            raise RewardError(
                f"step {state.step + 1}: {e}; {ckpt.last_checkpoint(self.out, resume=True)}"
            ) from None
        t1 = time.perf_counter()
        # Every process, as the held-out evaluation: under FSDP a forward of the sharded model is collective.
        k = self.k
        logged = (
            logged_rows(scored.first, cfg.num_completions_to_print)
            if self.logs_completions(state.step + k)
            else []
        )
        before = self.token_probs(scored, logged) if logged else None
        minibatches = self.update.prepare(scored.batch)  # update: reference and old log-probs, then
        t2 = time.perf_counter()
        try:
            stats = self.update.run(minibatches)  # the optimizer steps
        except NonFiniteError as e:
            where = ckpt.last_checkpoint(self.out, resume=True)
            raise NonFiniteError(
                f"step {state.step + 1}: {e}; stopped ({where}; on_nonfinite=skip skips such steps instead)"
            ) from None
        t3 = time.perf_counter()
        if cfg.sync_ref_model and crossed(state.step + k, k, cfg.ref_model_sync_steps):
            mix_reference(self.ref_model, self.model, cfg.ref_model_mixup_alpha)  # (TR-DPO)
        tokens = None
        if before is not None:
            texts = token_texts(self.tokenizer, scored.first, logged)
            tokens = StepTokens(logged, texts, before, self.token_probs(scored, logged))
        state.step += k
        state.total_completions += scored.num_sampled
        state.nonfinite_skipped += stats.nonfinite_skipped
        state.nonfinite_steps += bool(stats.nonfinite_skipped and not stats.updates)
        state.elapsed_seconds += time.perf_counter() - t0
        times = StepTimes(collect=t1 - t0, ref_old=t2 - t1, update=t3 - t2)
        return StepOutput(self.step_metrics(scored, stats, times), scored, tokens)

    def step_metrics(self, scored: ScoredBatch, stats, times: StepTimes) -> dict[str, float]:
        """The step's row of metrics.jsonl: the sample's and the update's (tinygrpo/run/metrics.py), the prompts',
        and the trainer's own counters."""
        cfg, state = self.cfg, self.state
        lr, n = self.optim.learning_rate, state.total_completions
        m = step_metrics(
            scored, stats, times, self.procs, self.rewards.names, learning_rate=lr, num_completions=n
        )
        m.update(self.prompt_stats.counts())
        m.update(answer_metrics(scored.first, self.prompts.columns, self.evaluator.verifier, self.procs))
        m["time/elapsed"] = state.elapsed_seconds
        if cfg.on_nonfinite == "skip":
            m["nonfinite_skipped"] = state.nonfinite_skipped
        if self.update.loss_cfg.entropy_bonus:
            m["entropy_coef"] = self.update.entropy_coef.value
        if not self.update.needs_old:
            m["ratio_is_exactly_one"] = 1  # mu = 1: the gradient is the plain policy gradient (see README)
        return m

    def logs_completions(self, step: int) -> bool:
        """Whether the loop logs the sampled completions after `step`."""
        cfg, every = self.cfg, crossed(step, self.k, self.cfg.logging_steps)
        return cfg.log_completions and cfg.num_completions_to_print > 0 and every

    def token_probs(self, scored: ScoredBatch, rows: list[int]) -> TokenProbs:
        """The policy's log-probs and entropies of the completions the step logs (logs.token_probs: a no-grad
        forward that changes nothing about training), at the temperature of the loss."""
        return token_probs(self.model, self.backend, scored.first, rows, self.sampling.temperature)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy (and pass@k) on the held-out split; every process gets the same numbers."""
        return self.evaluator(self.model, self.step)

    def evaluate_into(self, m: dict) -> dict[str, float]:
        """An evaluation at this step: its metrics added to the step's `m`, its details logged, then on_evaluate."""
        m.update(evaluation := self.evaluate())
        self.log_evaluation_details()
        self.callbacks.evaluate(self.step, m)
        return evaluation

    def log_evaluation_details(self) -> None:
        """At an evaluation (main process): what the report shows per prompt (tinygrpo/run/logs.py)."""
        held = self.evaluator.last
        if not self.procs.is_main or held is None or not held.completions:
            return
        rows, beliefs = self.evaluator.rows, lambda answers: self.evaluator.beliefs(self.model, answers)
        self.logs.evaluation(
            self.step, self.prompt_stats.pass_rate, rows, held.completions, held.right, beliefs
        )

    def forecast(self) -> dict[str, float]:
        """The signal forecast before the first step, said (tinygrpo/run/watch.py); its metrics ({} when off)."""
        try:
            return forecast_before_training(
                self.generator, self.evaluator.verifier, RunConfig.of(self.cfg), self.acc.print, self.warn
            )
        except RewardFailure as e:  # (the first samples a reward sees: said as a step's failure would be)
            where = ckpt.last_checkpoint(self.out, resume=True)
            raise RewardError(f"before the first step (the signal forecast): {e}; {where}") from None

    def warn(self, line: str, say=None) -> None:
        """A warning of the run (main process): said (on stderr, or by `say`), and logged for the report."""
        if self.procs.is_main:
            (say or partial(print, file=sys.stderr))(line)
            self.logs.warning(self.step, line)

    # ------------------------------------------------------------------ the loop
    def log(self, metrics: dict) -> None:
        self.logs.metrics(self.step, metrics)
        if self.cfg.report_to != "none":
            self.acc.log(metrics, step=self.step)
        self.callbacks.log(self.step, metrics)

    def train(self, resume_from: Path | None = None) -> dict:
        """Run to max_steps; returns a summary (held-out accuracy before/after, wall time). `resume_from`: a
        checkpoint already chosen (train_grpo.py checks it first); else cfg.resume_from_checkpoint is resolved."""
        cfg, t_start = self.cfg, time.perf_counter()
        self.resume(resume_from)
        self.callbacks.event("on_train_begin", self.step)
        if not cfg.needs_old_logps:
            self.acc.print(
                "num_iterations=1, one mini-batch: the ratio is exactly 1, so the clip never acts and the "
                "gradient is the policy gradient; the loss value itself hovers near 0 (docs/algorithm.md says why)."
            )
        forecast = self.forecast() if self.step == 0 else {}  # (its line before the progress bar's)
        bar = ProgressBar(cfg.max_steps, self.step, enabled=not cfg.disable_tqdm and self.procs.is_main)
        # A signal from the first evaluation to the last file written asks for a stop at the next step boundary;
        # after the last step there is none left, and the end-of-run writes are finished first.
        with StopOnSignal(self.procs.is_main) as stop:
            first_eval = self.evaluate() if self.step == 0 else {}
            if first_eval or forecast:
                self.log({**first_eval, **forecast, "num_completions": 0, "time/elapsed": 0.0})
            if first_eval:
                self.log_evaluation_details()
            m: dict = {}
            try:
                go_on = True
                while go_on and self.step < cfg.max_steps:
                    m, go_on = self.loop_step(bar, stop)
            finally:
                bar.close()
            summary = self.summary(forecast, first_eval, m, time.perf_counter() - t_start)
            self.finish(summary, stop.name)
            if stop.requested and self.procs.is_main:
                print(
                    f"{stop.name} after the last step: the end-of-run writes were finished first",
                    file=sys.stderr,
                )
        if cfg.report_to != "none":
            self.acc.end_training()
        self.callbacks.event("on_train_end", self.step)
        self.procs.wait()
        return summary

    def loop_step(self, bar: ProgressBar, stop: StopOnSignal) -> tuple[dict, bool]:
        """One step of the loop and what follows it: the watch, evaluation, logs, a checkpoint. Its metrics, and
        False when the run stops here (a signal, a callback): the summary still reads this last step's metrics."""
        cfg, k = self.cfg, self.k
        self.callbacks.event("on_step_begin", self.step)
        out = self.training_step()
        self.callbacks.event("on_step_end", self.step)
        # A stop asked by a callback ends the run here (agreed first: every process asks, every step).
        last = self.callbacks.agreed_stop(self.procs.any) or self.step == cfg.max_steps
        stop.last_step_done = last  # (before its row is logged)
        m = out.metrics
        for line in self.watch.observe(self.step, m):  # a run that cannot learn says so
            self.warn(line, bar.say)
        if evaluated := (crossed(self.step, k, cfg.eval_steps) or last):
            self.evaluate_into(m)
        first = cfg.logging_first_step and self.step == k
        if crossed(self.step, k, cfg.logging_steps) or first or last or "eval/accuracy" in m:
            self.log(m)
            if self.logs_completions(self.step):
                answers, shown = self.prompts.columns.get("answer"), cfg.num_completions_to_print
                self.logs.completions(self.step, out.scored, self.rewards.names, shown, answers, out.tokens)
        bar.update(m, k)
        if self.step < cfg.max_steps and self.procs.any(stop.requested):  # all at the same step
            return m, False
        if self.callbacks.agreed_stop(self.procs.any):  # (on_evaluate, on_log may ask too)
            # (asked after this step's evaluation point: the run still ends evaluated, as any run)
            if not evaluated and self.evaluate_into(m):
                self.log({key: v for key, v in m.items() if key.startswith("eval/")})
            self.acc.print(f"a callback stopped the run after step {self.step} (should_training_stop)")
            return m, False
        if cfg.save_steps and crossed(self.step, k, cfg.save_steps) and self.step < cfg.max_steps:
            self.save_checkpoint()
        return m, True

    def summary(self, forecast: dict, first_eval: dict, m: dict, seconds: float) -> dict:
        """summary.json: held-out accuracy before and after, the run's length, time and samples."""
        after = {k: v for k, v in m.items() if k.startswith("eval/")}
        state, stopped = self.state, self.callbacks.should_stop
        done = {"steps": self.step, "wall_seconds": seconds, "num_completions": state.total_completions}
        skipped = {"nonfinite_skipped_steps": state.nonfinite_steps, "stopped_by_callback": stopped}
        return {"forecast": forecast, "eval_before": first_eval, "eval_after": after, **done, **skipped}

    def finish(self, summary: dict, signal_name: str) -> None:
        """The end of a run: a run whose every step was skipped fails; then its files (checkpoint.write_run_end)."""
        cfg = self.cfg
        finished = self.step == cfg.max_steps or self.callbacks.should_stop  # (a callback's stop is an end)
        if finished:
            ckpt.say_skipped_steps(self.state.nonfinite_steps, self.step, self.out, self.acc.print)
        write_run_end(
            self.out,
            finished=finished,
            step=self.step,
            save_checkpoint=self.save_checkpoint,
            model=self.model,
            tokenizer=self.tokenizer,
            summary=summary,
            is_main=self.procs.is_main,
            make_plots=cfg.make_plots,
            make_report=cfg.make_report,
            signal_name=signal_name,
        )

    # ------------------------------------------------------------------ checkpoints
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
        """checkpoint-<step> (tinygrpo/run/checkpoint.py): accelerate's state (model, optimizer, RNGs), every
        component's state, the settings and a manifest; written under a temporary name, then renamed. Non-finite
        weights are never saved."""
        bad = nonfinite_weight(self.model)
        if bad is not None:
            raise NonFiniteError(
                f"step {self.step}: the weights are NaN or infinite ({bad}; a learning rate too large?); not saved "
                f"({ckpt.last_checkpoint(self.out, resume=True)})"
            )
        parts, keep = self.checkpoint_parts(), self.cfg.save_total_limit
        path = ckpt.save_checkpoint(
            self.out, self.step, self.acc, self.procs, **parts, config=asdict(self.cfg), keep=keep
        )
        self.callbacks.event("on_save", self.step)
        return path

    def resume(self, resume_from: Path | None) -> None:
        """Restore a checkpoint into every component (`resume_from`, or cfg.resume_from_checkpoint resolved), its
        settings checked against this run's (a caller of train() may not have checked them, as train_grpo.py does
        first); the logs cut back to its step."""
        if resume_from is None and self.cfg.resume_from_checkpoint:
            resume_from = ckpt.resolve_checkpoint(self.cfg.resume_from_checkpoint, self.out, self.acc.print)
        if resume_from is None:
            return
        self.load_checkpoint(resume_from)
        if self.procs.is_main:
            self.logs.truncate_after(self.step)
        self.acc.print(f"resumed from {resume_from} at step {self.step}")

    def load_checkpoint(self, path: Path) -> None:
        """Restore a checkpoint into every component, its settings checked against this run's."""
        check = lambda saved: ckpt.check_same_run(saved, self.cfg, path)  # noqa: E731
        ckpt.load_checkpoint(path, self.acc, self.procs, **self.checkpoint_parts(), check_config=check)
