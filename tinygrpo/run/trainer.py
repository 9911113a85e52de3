"""GRPOTrainer: one training step, the loop around it (evaluation, logging, checkpoints), and its set-up.

One step reads top to bottom in `training_step`:

    generate    rollout.sample_round()      the next prompts, G completions of each   (tinygrpo/rollout/)
    score       rollout.score(round)        each completion's rewards
    advantages  rollout.advantages(round)   group-relative, over the global batch
    [refill     rollout.refill(round)       explore rounds, dynamic sampling: variants, off for plain GRPO]
    update      update.prepare(batch)       reference / old log-probs of the groups that are run  (tinygrpo/update/)
                update.run(minibatches)     num_iterations x mini-batches: grpo_loss -> backward -> clip -> AdamW
    metrics     step_metrics(...)           the step's row of metrics.jsonl

The math of every arrow is a pure function in tinygrpo/algorithm/ (nano_grpo.py writes the plain one out). Runs on one process or many (`accelerate launch`): each
process holds whole groups, rewards are gathered so advantages are computed on the global batch, and DDP averages
the gradients.
"""

from __future__ import annotations

import os
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed

from rewards import RewardError, resolve_rewards
from tinygrpo.model.backend import AutocastBackend, PolicyForward, select_backend
from tinygrpo.model.static_shapes import static_backend, static_shapes_on
from tinygrpo.rollout.config import RolloutConfig
from tinygrpo.rollout.distributed import Processes
from tinygrpo.rollout.generation import BatchGenerator, RewardFailure, ScoredBatch, reward_spec
from tinygrpo.rollout.prompt_stats import PromptStats
from tinygrpo.rollout.prompts import PromptSource
from tinygrpo.rollout.tool_calls import tool_use
from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run import launch
from tinygrpo.run.callbacks import Callbacks
from tinygrpo.run.checkpoint import SaveError
from tinygrpo.run.config import GRPOConfig
from tinygrpo.run.evaluation import HeldOutEvaluator
from tinygrpo.run.metrics import StepTimes, answer_metrics, step_metrics
from tinygrpo.run.run_end import say_skipped_steps, write_run_end
from tinygrpo.run.run_logs import (
    ProgressBar,
    RunLogs,
    StepTokens,
    TokenProbs,
    logged_rows,
    token_probs,
    token_texts,
)
from tinygrpo.run.state import StepOutput, TrainerState, crossed
from tinygrpo.run.trainer_checkpoints import Checkpoints
from tinygrpo.run.validation import check_inputs
from tinygrpo.run.watch import LearningWatch, forecast_before_training, target_lengths
from tinygrpo.update.optim import OptimizerConfig, OptimizerStep, build_optimizer
from tinygrpo.update.policy_update import NonFiniteError, PolicyUpdate, UpdateConfig, mix_reference

__all__ = ["GRPOTrainer", "NonFiniteError", "SaveError", "StepOutput", "TrainerState"]


class GRPOTrainer(Checkpoints):
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
        self.acc = accelerator or launch.build_accelerator(cfg)
        self.procs = procs = Processes(self.acc)
        if cfg.max_steps is None:  # num_train_epochs: the run's length from the training split's size
            cfg.resolve_length(len(train_dataset), procs.num)
        self.tokenizer = tokenizer
        self.out = Path(cfg.output_dir)
        if procs.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
        if cfg.torch_num_threads or procs.num > 1:
            torch.set_num_threads(cfg.torch_num_threads or max(1, (os.cpu_count() or 1) // procs.num))

        # Rewards, data and model checked on real rows before anything expensive happens.
        funcs, names, weights = resolve_rewards(
            reward_funcs if reward_funcs is not None else cfg.reward_funcs, cfg.reward_weights
        )
        self.rewards = reward_spec(funcs, names, weights, cfg)
        check_inputs(cfg, model, tokenizer, train_dataset, eval_dataset, self.rewards, self.acc.device)
        self.train_dataset = train_dataset
        self.prompt_stats = PromptStats(len(train_dataset), cfg.pass_rate_ema)
        self.prompts = PromptSource(
            train_dataset,
            tokenizer,
            cfg.seed,
            cfg.prompt_sampler,
            cfg.prompt_sampler_floor,
            self.prompt_stats,
            cfg.shuffle_dataset,
        )
        set_seed(cfg.seed)
        dtype = getattr(torch, cfg.dtype)
        self.model = model = model.to(dtype)  # (float32: the model itself, unchanged)
        self.ref_model = ref_model.to(dtype) if ref_model is not None and cfg.beta > 0 else None  # (beta 0)
        if self.ref_model is not None:
            self.ref_model.eval().requires_grad_(False).to(self.acc.device)
        # One way of running the models, decided once: FSDP shards the parameters the grouped fast path reads.
        fsdp = self.acc.distributed_type == DistributedType.FSDP
        self.backend = select_backend(model, self.ref_model, prefer_grouped=cfg.grouped_forward and not fsdp)
        if static_shapes_on(cfg.static_shapes, self.acc.device):  # scoring too: every forward on a few shapes
            one = procs.num == 1
            self.backend = static_backend(self.backend, cfg.max_completion_length, cfg.cuda_graphs, one)
        if cfg.bf16:
            self.backend = AutocastBackend(self.backend, self.acc.device.type)
        rows = eval_dataset.to_dict() if eval_dataset is not None else None
        self.tools = tool_use(cfg, tokenizer)
        self.evaluator = HeldOutEvaluator(rows, tokenizer, self.backend, cfg, tools=self.tools)
        schedule = OptimizerConfig.of(cfg).per_generation(cfg.updates_per_generation)
        optimizer, scheduler = build_optimizer(model, schedule)
        policy, optimizer = self.acc.prepare(PolicyForward(model, self.backend), optimizer)
        policy.train()
        self.optim = OptimizerStep(policy, optimizer, scheduler, self.acc)
        kl_ref = self.ref_model if cfg.use_kl_in_reward else None  # the KL goes in the reward, or in the loss
        self.generator = BatchGenerator(
            RolloutConfig.of(cfg),
            model,
            self.backend,
            tokenizer,
            self.prompts,
            self.rewards,
            procs,
            self.prompt_stats,
            kl_ref,
            self.tools,
        )
        loss_ref = self.ref_model if cfg.kl_in_loss else None
        self.update = PolicyUpdate(
            UpdateConfig.of(cfg), policy, model, loss_ref, self.backend, self.optim, procs
        )
        self.state = TrainerState()
        self.logs = RunLogs(self.out, enabled=procs.is_main)
        target, lengths = target_lengths(self.prompts.columns, cfg)
        self.watch = LearningWatch(cfg.max_completion_length, cfg.num_generations, lengths, target)
        # transformers' TrainerCallbacks, called where TRL calls them (tinygrpo/run/callbacks.py)
        self.callbacks = Callbacks(
            callbacks or [],
            cfg,
            procs.is_main,
            model=model,
            processing_class=tokenizer,
            optimizer=optimizer,
            lr_scheduler=scheduler,
        )
        self.callbacks.event("on_init_end", 0)

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
            where = ckpt.last_checkpoint(self.out, resume=True)
            raise RewardError(f"step {state.step + 1}: {e}; {where}") from None
        t1 = time.perf_counter()
        # Every process, as the held-out evaluation: under FSDP a forward of the sharded model is collective.
        k = cfg.updates_per_generation  # optimizer steps this generation makes: what `step` counts, as in TRL
        probe = self.logs_completions(state.step + k)
        logged = logged_rows(scored.first, cfg.num_completions_to_print) if probe else []
        before = self.token_probs(scored, logged) if probe else None
        minibatches = self.update.prepare(scored.batch)  # update: reference and old log-probs, then
        t2 = time.perf_counter()
        try:
            stats = self.update.run(minibatches)  # the optimizer steps
        except NonFiniteError as e:
            raise NonFiniteError(
                f"step {state.step + 1}: {e}; stopped ({ckpt.last_checkpoint(self.out, resume=True)}; on_nonfinite=skip "
                "skips such steps instead)"
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

        m = step_metrics(
            scored,
            stats,
            StepTimes(collect=t1 - t0, ref_old=t2 - t1, update=t3 - t2),
            self.procs,
            self.rewards.names,
            learning_rate=self.optim.learning_rate,
            num_completions=state.total_completions,
        )
        m.update(self.prompt_stats.counts())
        m.update(answer_metrics(scored.first, self.prompts.columns, self.evaluator.verifier, self.procs))
        m["time/elapsed"] = state.elapsed_seconds
        if cfg.on_nonfinite == "skip":
            m["nonfinite_skipped"] = state.nonfinite_skipped
        if cfg.entropy_bonus:
            m["entropy_coef"] = self.update.entropy_coef.value
        if not cfg.needs_old_logps:
            m["ratio_is_exactly_one"] = 1  # mu = 1: the gradient is the plain policy gradient (see README)
        return StepOutput(m, scored, tokens)

    def logs_completions(self, step: int) -> bool:
        """Whether the loop logs the sampled completions after `step`."""
        cfg = self.cfg
        every = crossed(step, cfg.updates_per_generation, cfg.logging_steps)
        return cfg.log_completions and cfg.num_completions_to_print > 0 and every

    def token_probs(self, scored: ScoredBatch, rows: list[int]) -> TokenProbs:
        """The policy's log-probs and entropies of the completions the step logs (run_logs.token_probs: a no-grad
        forward that changes nothing about training), at the temperature of the loss."""
        return token_probs(self.model, self.backend, scored.first, rows, self.cfg.temperature)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy (and pass@k) on the held-out split; every process gets the same numbers."""
        return self.evaluator(self.model, self.step)

    def log_evaluation_details(self) -> None:
        """At an evaluation (main process): what the report shows per prompt (tinygrpo/run/run_logs.py)."""
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
                self.generator, self.evaluator.verifier, self.cfg, self.acc.print, self.warn
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
        cfg = self.cfg
        t_start = time.perf_counter()
        if resume_from is None and cfg.resume_from_checkpoint:
            resume_from = ckpt.resolve_checkpoint(cfg.resume_from_checkpoint, self.out, self.acc.print)
        if resume_from is not None:
            path = resume_from
            self.load_checkpoint(path)
            if self.procs.is_main:
                self.logs.truncate_after(self.step)
            self.acc.print(f"resumed from {path} at step {self.step}")
        if cfg.report_to != "none":
            name = cfg.run_name or Path(cfg.output_dir).name
            self.acc.init_trackers(
                "tinygrpo", init_kwargs={"wandb": {"name": name}, "trackio": {"name": name}}
            )
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
        with launch.StopOnSignal(self.procs.is_main) as stop:
            first_eval = self.evaluate() if self.step == 0 else {}
            if first_eval or forecast:
                self.log({**first_eval, **forecast, "num_completions": 0, "time/elapsed": 0.0})
            if first_eval:
                self.log_evaluation_details()
            m: dict = {}
            try:
                while self.step < cfg.max_steps:
                    self.callbacks.event("on_step_begin", self.step)
                    out = self.training_step()
                    self.callbacks.event("on_step_end", self.step)
                    last = (
                        self.step == cfg.max_steps or self.callbacks.should_stop
                    )  # (a callback's stop ends it)
                    stop.last_step_done = last  # (before its row is logged)
                    m = out.metrics
                    for line in self.watch.observe(self.step, m):  # a run that cannot learn says so
                        self.warn(line, bar.say)
                    k = cfg.updates_per_generation
                    if crossed(self.step, k, cfg.eval_steps) or last:
                        m.update(self.evaluate())
                        self.log_evaluation_details()
                        self.callbacks.evaluate(self.step, m)
                    first = cfg.logging_first_step and self.step == k
                    if crossed(self.step, k, cfg.logging_steps) or first or last or "eval/accuracy" in m:
                        self.log(m)
                        if self.logs_completions(self.step):
                            answers = self.prompts.columns.get("answer")
                            self.logs.completions(
                                self.step,
                                out.scored,
                                self.rewards.names,
                                cfg.num_completions_to_print,
                                answers,
                                out.tokens,
                            )
                    bar.update(m, k)
                    if self.step < cfg.max_steps and self.procs.any(stop.requested):  # all at the same step
                        break
                    if self.procs.any(self.callbacks.should_stop):  # (all at the same step)
                        self.acc.print(
                            f"a callback stopped the run after step {self.step} (should_training_stop)"
                        )
                        break
                    if cfg.save_steps and crossed(self.step, k, cfg.save_steps) and self.step < cfg.max_steps:
                        self.save_checkpoint()
            finally:
                bar.close()
            summary = {
                "forecast": forecast,
                "eval_before": first_eval,
                "eval_after": {k: v for k, v in m.items() if k.startswith("eval/")},
                "steps": self.step,
                "wall_seconds": time.perf_counter() - t_start,
                "num_completions": self.state.total_completions,
                "nonfinite_skipped_steps": self.state.nonfinite_steps,
                "stopped_by_callback": self.callbacks.should_stop,
            }
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

    def finish(self, summary: dict, signal_name: str) -> None:
        """The end of a run: a run whose every step was skipped fails; then its files (run_end.py)."""
        cfg = self.cfg
        finished = self.step == cfg.max_steps or self.callbacks.should_stop  # (a callback's stop is an end)
        if finished:
            say_skipped_steps(self.state.nonfinite_steps, self.step, self.out, self.acc.print)
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
