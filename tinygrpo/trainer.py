"""GRPOTrainer: one training step, the loop around it (evaluation, logging, checkpoints), and its set-up.

One step reads top to bottom in `training_step`:

    generate  (generation.py)  sample G completions per prompt, score them, advantages over the global batch
    prepare   (update.py)      the groups that are run, their layouts, reference / old log-probs
    run       (update.py)      num_iterations x num_mini_batches: grpo_loss (loss.py) -> backward -> clip -> AdamW
    metrics   (metrics.py)     the step's row of metrics.jsonl

The math of every arrow is a pure function in `core.py`. Runs on one process or many (`accelerate launch`): each
process holds whole groups, rewards are gathered so advantages are computed on the global batch, and DDP averages
the gradients.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from safetensors.torch import load_file, load_model, save_file, save_model
from tqdm.auto import tqdm

from rewards import accuracy, resolve_rewards

from . import checkpoint as ckpt
from . import launch
from .backend import AutocastBackend, PolicyForward, select_backend
from .config import ConfigError, GRPOConfig
from .distributed import Processes
from .evaluation import HeldOut, answer_beliefs, held_out_metrics
from .generation import BatchGenerator, ScoredBatch, reward_spec
from .loss import EntropyCoefficient
from .metrics import StepTimes, step_metrics
from .metrics_io import JsonlWriter, plot_metrics, truncate_after_step
from .optim import OptimizerStep, build_optimizer
from .problems import problem_kinds
from .prompt_stats import PromptStats
from .prompts import PromptSource, left_pad
from .report import write_report
from .rollout import SamplingParams
from .update import NonFiniteError, PolicyUpdate
from .validation import check_inputs

__all__ = ["GRPOTrainer", "NonFiniteError", "SaveError", "StepOutput"]

DETAIL_FILES = ("prompt_stats", "eval_failures", "beliefs")  # <name>.jsonl, written at every evaluation
MAX_BELIEF_PROMPTS, MAX_BELIEF_ANSWERS = 64, 32  # beliefs are logged for problem sets this small


@dataclass
class StepOutput:
    """What one training step returns: its metrics (global) and what it sampled."""

    metrics: dict[str, float]
    scored: ScoredBatch


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
    ) -> None:
        self.cfg = cfg = config
        self.acc = accelerator or Accelerator(
            log_with="tensorboard" if cfg.report_to == "tensorboard" else None, project_dir=cfg.output_dir
        )
        self.procs = procs = Processes(self.acc)
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
        check_inputs(cfg, model, tokenizer, train_dataset, eval_dataset, funcs, names, self.rewards.kwargs)
        self.train_dataset = train_dataset
        self.prompt_stats = PromptStats(len(train_dataset), cfg.pass_rate_ema)
        self.prompts = PromptSource(
            train_dataset,
            tokenizer,
            cfg.seed,
            cfg.prompt_sampler,
            cfg.prompt_sampler_floor,
            self.prompt_stats,
        )
        self.eval_rows = eval_dataset.to_dict() if eval_dataset is not None else None
        self._eval_prompts: tuple[torch.Tensor, torch.Tensor] | None = None  # tokenized on first use
        rows = self.eval_rows or {}
        ab = all(isinstance(v, int) for c in ("a", "b") for v in rows.get(c, [None]))  # an a+b problem set
        self._eval_kinds = problem_kinds(rows["a"], rows["b"]) if ab else None
        # The latest evaluation (set by `evaluate`): log_evaluation_details reads its greedy completions.
        self.last_held_out: HeldOut | None = None

        set_seed(cfg.seed)
        self.model = model
        self.ref_model = ref_model if cfg.beta > 0 else None  # beta == 0: no reference is built or kept
        if self.ref_model is not None:
            self.ref_model.eval().requires_grad_(False).to(self.acc.device)
        # One way of running the models, decided once: FSDP shards the parameters the grouped fast path reads.
        fsdp = self.acc.distributed_type == DistributedType.FSDP
        self.backend = select_backend(model, self.ref_model, prefer_grouped=cfg.grouped_forward and not fsdp)
        if cfg.bf16:
            self.backend = AutocastBackend(self.backend, self.acc.device.type)
        optimizer, scheduler = build_optimizer(model, cfg)
        policy, optimizer = self.acc.prepare(PolicyForward(model, self.backend), optimizer)
        policy.train()
        self.optim = OptimizerStep(policy, optimizer, scheduler, self.acc)
        kl_ref = self.ref_model if cfg.use_kl_in_reward else None  # the KL goes in the reward, or in the loss
        self.generator = BatchGenerator(
            cfg, model, self.backend, tokenizer, self.prompts, self.rewards, procs, self.prompt_stats, kl_ref
        )
        loss_ref = self.ref_model if cfg.kl_in_loss else None
        self.update = PolicyUpdate(cfg, policy, model, loss_ref, self.backend, self.optim, procs)

        self.step = 0
        self.total_completions = 0
        self.nonfinite_skipped = 0
        self.elapsed = 0.0  # wall-clock seconds spent in training steps (evaluation and checkpoints excluded)
        self.metrics_log = JsonlWriter(self.out / "metrics.jsonl", enabled=procs.is_main)
        self.completions_log = JsonlWriter(self.out / "completions.jsonl", enabled=procs.is_main)
        # What the report (tinygrpo/report.py) shows beside the metrics, written at every evaluation.
        self.details_log = {
            name: JsonlWriter(self.out / f"{name}.jsonl", enabled=procs.is_main) for name in DETAIL_FILES
        }

    # ------------------------------------------------------------------ one step
    def training_step(self) -> StepOutput:
        """Generate, score, compute advantages, optimize; advances `step`; returns the step's metrics."""
        cfg = self.cfg
        t0 = time.perf_counter()
        scored = self.generator.generate()
        t1 = time.perf_counter()
        minibatches = self.update.prepare(scored.batch)
        t2 = time.perf_counter()
        try:
            stats = self.update.run(minibatches)
        except NonFiniteError as e:
            raise NonFiniteError(
                f"step {self.step + 1}: {e}; stopped (the last checkpoint in {self.out} is intact; "
                f"on_nonfinite=skip skips such steps instead)"
            ) from None
        t3 = time.perf_counter()
        if cfg.sync_ref_model and (self.step + 1) % cfg.ref_model_sync_steps == 0:
            self.sync_reference()
        self.step += 1
        self.total_completions += scored.num_sampled
        self.nonfinite_skipped += stats.nonfinite_skipped
        self.elapsed += time.perf_counter() - t0

        m = step_metrics(
            scored,
            stats,
            StepTimes(collect=t1 - t0, ref_old=t2 - t1, update=t3 - t2),
            self.procs,
            self.rewards.names,
            learning_rate=self.optim.learning_rate,
            num_completions=self.total_completions,
        )
        m.update(self.prompt_stats.counts())
        m["time/elapsed"] = self.elapsed
        if cfg.on_nonfinite == "skip":
            m["nonfinite_skipped"] = self.nonfinite_skipped
        if cfg.entropy_bonus:
            m["entropy_coef"] = self.update.entropy_coef.value
        if not cfg.needs_old_logps:
            m["ratio_is_exactly_one"] = 1  # mu = 1: the gradient is the plain policy gradient (see README)
        return StepOutput(m, scored)

    def sync_reference(self) -> None:
        """TR-DPO-style reference update: ref <- alpha * policy + (1 - alpha) * ref."""
        a = self.cfg.ref_model_mixup_alpha
        with torch.no_grad():
            for pr, pp in zip(self.ref_model.parameters(), self.model.parameters(), strict=True):
                pr.mul_(1 - a).add_(pp.detach(), alpha=a)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy (and pass@k) on the held-out split; every process gets the same numbers."""
        if self.eval_rows is None or "answer" not in self.eval_rows:
            return {}
        if self._eval_prompts is None:
            ids = self.tokenizer(self.eval_rows["prompt"])["input_ids"]
            self._eval_prompts = tuple(
                t.to(next(self.model.parameters()).device) for t in left_pad(ids, self.tokenizer.pad_token_id)
            )
        cfg = self.cfg
        # pass@k's own generator, seeded by the step: evaluating never moves the training RNG.
        gen = torch.Generator().manual_seed(cfg.seed + 7919 * (self.step + 1))
        params = SamplingParams(cfg.max_completion_length, cfg.temperature, cfg.top_k, cfg.top_p, gen)
        self.last_held_out = held_out_metrics(
            self.model,
            self.tokenizer,
            *self._eval_prompts,
            self.eval_rows["answer"],
            params,
            pass_k=cfg.eval_pass_k,
            backend=self.backend,
            kinds=self._eval_kinds,
        )
        return self.last_held_out.metrics

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """checkpoint-<step>: model, optimizer and RNG states (accelerate), each process's sampling generator, the
        reference when it is synced, trainer_state.json, the settings and a manifest; written under a temporary
        name, then renamed. Non-finite weights are never saved."""
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise NonFiniteError(
                f"step {self.step}: the weights are NaN or infinite (a learning rate too large?); not saved, the "
                f"last checkpoint in {self.out} is intact"
            )
        final = self.out / f"checkpoint-{self.step}"
        tmp = self.out / f".tmp-checkpoint-{self.step}"
        # A failure on one process is settled by all of them at each hand-off (procs.any), so that none waits for a
        # process that has given up; the process that failed says why, the others stop with it silently.
        failed: OSError | None = None
        try:
            if self.procs.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            self.procs.wait()
            self.acc.save_state(str(tmp), safe_serialization=True)
            sampler = {"state": ckpt.generator_state_to_list(self.generator.generator)}
            ckpt.write_json_atomic(tmp / f"sampler_{self.procs.rank}.json", sampler)
            # Every process holds the same statistics (they fold in gathered rewards); each saves its copy.
            save_file(
                self.prompt_stats.state_dict(), str(tmp / f"prompt_stats_{self.procs.rank}.safetensors")
            )
        except OSError as e:
            failed = e
        if not self.procs.any(failed is not None) and self.procs.is_main:
            try:
                if self.ref_model is not None and self.cfg.sync_ref_model:
                    # (save_model stores tied weights once)
                    save_model(self.ref_model, str(tmp / "ref_model.safetensors"))
                state = {
                    "step": self.step,
                    **self.prompts.state_dict(),
                    "total_completions": self.total_completions,
                    "nonfinite_skipped": self.nonfinite_skipped,
                    "elapsed_seconds": self.elapsed,
                    "num_processes": self.procs.num,
                    "scheduler": self.optim.scheduler.state_dict(),
                }
                if self.cfg.use_adaptive_entropy:
                    ec = self.update.entropy_coef
                    state["entropy_coef"] = {"value": ec.value, "last_entropy": ec.last_entropy}
                ckpt.write_json_atomic(tmp / ckpt.STATE_FILE, state)
                ckpt.write_json_atomic(tmp / ckpt.CONFIG_FILE, asdict(self.cfg))
                ckpt.write_manifest(tmp)
                ckpt.publish(tmp, final)
                ckpt.prune(self.out, self.cfg.save_total_limit)
            except OSError as e:
                failed = e
        if self.procs.any(failed is not None):
            if failed is None:
                raise SaveError("")
            kept = ckpt.checkpoint_dirs(self.out)
            raise SaveError(
                f"step {self.step}: could not write the checkpoint: {failed.strerror or failed}"
                + (f" ({failed.filename})" if failed.filename else "")
                + (f"; the last complete checkpoint is {kept[-1]}" if kept else "; no checkpoint was kept")
            )
        return final

    def load_checkpoint(self, path: Path) -> None:
        """Restore a checkpoint (see save_checkpoint); a file that cannot be read is one ConfigError naming it."""
        try:
            state = json.loads((path / ckpt.STATE_FILE).read_text())
            if state["num_processes"] != self.procs.num:
                raise ConfigError(
                    f"checkpoint {path} was written by {state['num_processes']} processes; resume with the same "
                    f"number (this launch has {self.procs.num})"
                )
            # (train_grpo.py checks the settings before loading anything; a caller of train() may not have)
            saved = path / ckpt.CONFIG_FILE
            if saved.is_file():
                launch.check_same_run(json.loads(saved.read_text()), self.cfg, path)
            self.acc.load_state(str(path))
            self.optim.scheduler.load_state_dict(state["scheduler"])
            sampler = json.loads((path / f"sampler_{self.procs.rank}.json").read_text())
            ckpt.generator_state_from_list(self.generator.generator, sampler["state"])
            if self.ref_model is not None and (path / "ref_model.safetensors").is_file():
                load_model(self.ref_model, str(path / "ref_model.safetensors"))
            self.step = state["step"]
            self.prompts.load_state_dict(state)
            self.total_completions = state["total_completions"]
            self.nonfinite_skipped = state["nonfinite_skipped"]
            self.elapsed = state.get("elapsed_seconds", 0.0)
            if "entropy_coef" in state:
                self.update.entropy_coef = EntropyCoefficient(**state["entropy_coef"])
            stats = path / f"prompt_stats_{self.procs.rank}.safetensors"
            if stats.is_file():  # (checkpoints of older versions have none: the statistics start afresh)
                self.prompt_stats.load_state_dict(load_file(str(stats)))
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001  (a damaged file of the user's checkpoint: say which and why)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"cannot resume from {path}: {first}") from None

    # ------------------------------------------------------------------ the loop
    def log(self, metrics: dict) -> None:
        self.metrics_log.write({"step": self.step, **metrics})
        if self.cfg.report_to != "none":
            self.acc.log(metrics, step=self.step)

    def log_completions(self, scored: ScoredBatch) -> None:
        """The first num_completions_to_log samples of the step's first round: prompt, completion, each reward
        function's value, the combined reward, the advantage and (when the data has one) the gold answer."""
        first, names = scored.first, self.rewards.names
        G = self.cfg.num_generations
        answers = self.prompts.columns.get("answer")
        for i in range(min(self.cfg.num_completions_to_log, len(first.completions))):
            values = first.rewards_per_func[i].tolist()
            rewards = {n: (None if math.isnan(v) else v) for n, v in zip(names, values, strict=True)}
            reward = float(first.batch.rewards[i])
            row = {"step": self.step, "prompt": first.prompts[i], "completion": first.completions[i]}
            row |= {"rewards": rewards, "reward": None if math.isnan(reward) else reward}
            row["advantage"] = float(first.batch.advantages[i])
            if answers is not None:
                row["answer"] = answers[first.idx[i // G]]
            self.completions_log.write(row)

    def log_evaluation_details(self) -> None:
        """At an evaluation (main process): every training prompt's pass-rate estimate, the held-out problems answered
        wrong, and, on a small problem set, the policy's belief in each answer (the report's per-prompt pictures)."""
        held = self.last_held_out
        if not self.procs.is_main or self.eval_rows is None or held is None or not held.completions:
            return
        rates = [None if r != r else round(r, 3) for r in self.prompt_stats.pass_rate.tolist()]
        self.details_log["prompt_stats"].write({"step": self.step, "pass_rate": rates})
        rows, outs = self.eval_rows, held.completions
        wrong = [
            [p, str(a), c]
            for p, a, c, ok in zip(
                rows["prompt"],
                rows["answer"],
                outs,
                accuracy(completions=outs, answer=rows["answer"]),
                strict=True,
            )
            if not ok
        ]
        self.details_log["eval_failures"].write({"step": self.step, "total": len(outs), "failures": wrong})
        answers = sorted({str(a) for a in rows["answer"]}, key=lambda a: (len(a), a))
        if len(outs) <= MAX_BELIEF_PROMPTS and len(answers) <= MAX_BELIEF_ANSWERS:
            probs = answer_beliefs(self.model, self.tokenizer, *self._eval_prompts, answers, self.backend)
            row = {"step": self.step, "questions": rows["prompt"], "answers": answers}
            row["gold"] = [str(a) for a in rows["answer"]]
            self.details_log["beliefs"].write(
                {**row, "probs": [[round(x, 4) for x in r] for r in probs.tolist()]}
            )

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
                for name in ("metrics.jsonl", "completions.jsonl", *(f"{d}.jsonl" for d in DETAIL_FILES)):
                    truncate_after_step(self.out / name, self.step)
            self.acc.print(f"resumed from {path} at step {self.step}")
        if cfg.report_to != "none":
            self.acc.init_trackers("tinygrpo")
        if not cfg.needs_old_logps:
            self.acc.print(
                "num_iterations=1, one mini-batch: the ratio is exactly 1, so the clip never acts and the "
                "gradient is the policy gradient; the loss value itself hovers near 0 (see README)."
            )
        first_eval = self.evaluate() if self.step == 0 else {}
        if first_eval:
            self.log({**first_eval, "num_completions": 0, "time/elapsed": 0.0})
            self.log_evaluation_details()
        summary = {"eval_before": first_eval}
        bar = tqdm(
            total=cfg.max_steps,
            initial=self.step,
            disable=cfg.disable_tqdm or not self.procs.is_main,
            desc="grpo",
            dynamic_ncols=True,
        )
        m: dict = {}
        last_eval = None
        with StopOnSignal(self.procs.is_main) as stop:
            try:
                while self.step < cfg.max_steps:
                    out = self.training_step()
                    m = out.metrics
                    if self.step % cfg.eval_steps == 0 or self.step == cfg.max_steps:
                        m.update(self.evaluate())
                        self.log_evaluation_details()
                    if (
                        self.step % cfg.logging_steps == 0
                        or self.step == cfg.max_steps
                        or "eval/accuracy" in m
                    ):
                        self.log(m)
                        if self.step % cfg.logging_steps == 0:
                            self.log_completions(out.scored)
                    last_eval = m.get("eval/accuracy", last_eval)
                    post = {"reward": f"{m['reward']:.3f}"}
                    if last_eval is not None:
                        post["held_out"] = f"{last_eval:.3f}"
                    bar.set_postfix(post, refresh=False)
                    bar.update(1)
                    if self.procs.any(stop.requested):  # every process stops at the same step
                        break
                    if cfg.save_steps and self.step % cfg.save_steps == 0 and self.step < cfg.max_steps:
                        self.save_checkpoint()
            finally:
                bar.close()
        wall = time.perf_counter() - t_start
        self.save_checkpoint()
        if self.step < cfg.max_steps:
            if cfg.make_report and self.procs.is_main:
                write_report(self.out)
            raise KeyboardInterrupt(
                f"{stop.name}: stopped after step {self.step}; checkpoint saved in {self.out}. Resume with the same "
                f"command plus --resume_from_checkpoint latest"
            )
        eval_after = {k: v for k, v in m.items() if k.startswith("eval/")}
        summary.update(
            {
                "eval_after": eval_after,
                "steps": self.step,
                "wall_seconds": wall,
                "num_completions": self.total_completions,
            }
        )
        if self.procs.is_main:
            self.model.save_pretrained(self.out / "final")
            self.tokenizer.save_pretrained(self.out / "final")
            if cfg.make_plots:
                plot_metrics(self.out / "metrics.jsonl", self.out / "plots.png")
            if cfg.make_report:
                write_report(self.out)
        if cfg.report_to != "none":
            self.acc.end_training()
        self.procs.wait()
        return summary


class SaveError(RuntimeError):
    """A checkpoint could not be written (disk full, permissions): what was kept is in the message."""


class StopOnSignal:
    """Ctrl-C (SIGINT) or SIGTERM (what Docker, Kubernetes and Slurm send) asks for a stop at the next step
    boundary, where a checkpoint is exact; a second Ctrl-C stops at once. A SIGTERM after the first signal is taken
    as the same request (a launcher that dies on Ctrl-C sends one: see launch.stop_with_launcher). Installed only in
    the main thread (signal handlers can be set nowhere else)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.requested = False
        self.name = "interrupted"
        self._previous: dict = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
            return
        self.requested = True
        self.name = signal.Signals(signum).name
        if self.verbose:
            tqdm.write(f"{self.name}: stopping after this step and saving a checkpoint (again to abort)")
