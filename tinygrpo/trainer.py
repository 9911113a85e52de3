"""GRPOTrainer: rollout -> score -> advantages -> mu update passes -> log / eval / checkpoint.

The update passes (loss, backward, clip, optimizer step) are in `update.py`, which this class inherits.
The trainer only orchestrates. The math of every arrow is a pure function: sampling and completion logits in
`rollout.py`, advantages / log-probs / clipped surrogate / KL / aggregation in `core.py`, rewards in `rewards/`.
Runs on one process or many (`accelerate launch --num_processes N`): each process holds whole groups, rewards are
gathered so advantages are computed on the global batch, and gradients are averaged by DDP.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm
from transformers import get_scheduler

from rewards import EOS, compute_rewards, resolve_rewards, reward_metrics
from rewards.scoring import combine_rewards

from . import checkpoint as ckpt
from .batch import Batch, concat_batches
from .config import ConfigError, GRPOConfig
from .core import group_advantages, selective_log_softmax
from .evaluation import held_out_metrics
from .metrics_io import JsonlWriter, plot_metrics, truncate_after_step
from .optim import lean_adamw_supported
from .rollout import GroupScorer, completion_logits, decode_rows, sample_completions, uses_grouped_path
from .update import NonFiniteError, PolicyUpdate
from .validation import check_inputs

__all__ = ["GRPOTrainer", "NonFiniteError"]  # NonFiniteError lives in update.py; train_grpo.py imports it from here


class GRPOTrainer(PolicyUpdate):
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
        self.acc = accelerator or Accelerator(log_with="tensorboard" if cfg.report_to == "tensorboard" else None,
                                              project_dir=cfg.output_dir)  # fmt: skip
        self.G = cfg.num_generations
        self.tokenizer = tokenizer
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.out = Path(cfg.output_dir)
        self.is_main = self.acc.is_main_process
        if self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
        n_proc = self.acc.num_processes
        if cfg.torch_num_threads or n_proc > 1:
            torch.set_num_threads(cfg.torch_num_threads or max(1, (os.cpu_count() or 1) // n_proc))

        # Rewards: resolved and probed once on real rows before anything expensive happens.
        specs = reward_funcs if reward_funcs is not None else cfg.reward_funcs
        self.reward_funcs, self.reward_names, self.reward_weights = resolve_rewards(specs, cfg.reward_weights)
        self.columns = [c for c in train_dataset.column_names if c != "prompt"]
        check_inputs(cfg, model, tokenizer, train_dataset, eval_dataset, self.reward_funcs, self.reward_names,
                     self._reward_kwargs())  # fmt: skip

        # Columns as plain lists (a `datasets` column indexed row by row is slow), prompts tokenized once.
        table = train_dataset.to_dict()
        self.train_prompts: list[str] = table["prompt"]
        self.train_columns = {c: table[c] for c in self.columns}
        self.train_prompt_ids = tokenizer(self.train_prompts)["input_ids"]
        # Every train prompt left-padded once (when that table is small), so that a batch is a row selection.
        self._padded_train: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        if len(self.train_prompt_ids) * max(map(len, self.train_prompt_ids)) <= 1 << 24:
            ids, mask = self._pad_prompts(self.train_prompt_ids)
            self._padded_train = (ids, mask, mask.sum(1))
        self.eval_rows = eval_dataset.to_dict() if eval_dataset is not None else None
        self._eval_ids: tuple[torch.Tensor, torch.Tensor] | None = None

        set_seed(cfg.seed)
        self.model = model
        self.scorer = GroupScorer(model)
        self.ref_model = ref_model if cfg.beta > 0 else None  # beta == 0: no reference is built or kept
        if self.ref_model is not None:
            self.ref_model.eval().requires_grad_(False)
        decay, no_decay = [], []
        for n, p in model.named_parameters():
            (no_decay if p.ndim < 2 or "ln" in n else decay).append(p)
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if cfg.weight_decay == 0:  # one group, one fused kernel: the split only matters with decay
            groups = [{"params": decay + no_decay, "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW(
            groups,
            lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), fused=True,
        )  # fmt: skip  (fused: one kernel for all 28 small tensors, not a Python loop over them)
        sched_name = cfg.lr_scheduler_type
        if sched_name == "constant" and cfg.warmup_steps:
            sched_name = "constant_with_warmup"  # transformers' "constant" ignores warm-up
        self.scheduler = get_scheduler(
            sched_name, self.optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.max_steps
        )
        # The scheduler is NOT prepared: accelerate's wrapper steps it num_processes times per call (it assumes
        # the per-process batch was split from a global one); here every process makes the same optimizer steps.
        # Its state is checkpointed as JSON in trainer_state.json.
        self.scorer, self.optimizer = self.acc.prepare(self.scorer, self.optimizer)
        # The grouped fast path reads the modules' parameters directly, which FSDP shards.
        self.grouped = cfg.grouped_forward and self.acc.distributed_type != DistributedType.FSDP
        # Plain data parallelism (or one process), no loss scaler, no accumulation: backward, clipping and the
        # optimizer step are torch's own calls, without accelerate's per-call checks (~0.6 ms a step on CPU).
        self._plain = (self.acc.distributed_type in (DistributedType.NO, DistributedType.MULTI_CPU,
                                                     DistributedType.MULTI_GPU)
                       and self.acc.scaler is None and self.acc.gradient_accumulation_steps == 1)  # fmt: skip
        self.policy = self.acc.unwrap_model(self.scorer).model  # the bare model (unwrapping costs ~0.2 ms a call)
        # Train/eval switches by a flat list: Module.train() walks the tree, ~0.2 ms a call on this model.
        self._policy_modules = list(self.scorer.modules())
        self._decoded: dict[tuple[int, ...], str] = {}  # completion ids -> text, see decode_rows
        self._sum_names = ("tokens", "entropy", "ratio", "clip_ratio/low", "clip_ratio/high", "clip_ratio/region",
                           *(("kl",) if cfg.beta > 0 else ()))  # what compute_loss sums, in order  # fmt: skip
        self._params = [p for p in self.scorer.parameters() if p.requires_grad]
        self._opt = self.optimizer.optimizer if self._plain else self.optimizer
        self._lean_step = self._plain and lean_adamw_supported(self._opt)  # see tinygrpo/optim.py
        # Sampling randomness: one generator per process, saved in checkpoints (exact resume).
        self.sample_gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + self.acc.process_index)

        self.step = 0
        self.prompt_cursor = 0  # global prompts consumed so far (the data order is a function of seed + cursor)
        self.total_completions = 0
        self.nonfinite_skipped = 0
        self._perms: dict[int, list[int]] = {}
        self.metrics_log = JsonlWriter(self.out / "metrics.jsonl", enabled=self.is_main)
        self.completions_log = JsonlWriter(self.out / "completions.jsonl", enabled=self.is_main)

    def _reward_kwargs(self) -> dict:
        return {"max_completion_length": self.cfg.max_completion_length, "eos": EOS}

    # ------------------------------------------------------------------ data
    def _global_indices(self, count: int) -> list[int]:
        """The next `count` prompts of the global order: a fresh permutation (seed + epoch) per pass."""
        n = len(self.train_prompt_ids)
        out = []
        for k in range(self.prompt_cursor, self.prompt_cursor + count):
            epoch = k // n
            if epoch not in self._perms:  # only the current epoch's order is kept, as a plain list
                gen = torch.Generator().manual_seed(self.cfg.seed + epoch)
                self._perms = {epoch: torch.randperm(n, generator=gen).tolist()}
            out.append(self._perms[epoch][k % n])
        self.prompt_cursor += count
        return out

    def _local_prompts(self) -> list[int]:
        """This process's share (whole groups) of the next global batch of prompts."""
        per_proc = self.cfg.per_device_train_batch_size // self.G
        idx = self._global_indices(per_proc * self.acc.num_processes)
        r = self.acc.process_index
        return idx[r * per_proc : (r + 1) * per_proc]

    def _pad_prompts(self, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        T = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id
        prompt_ids = torch.tensor([[pad] * (T - len(x)) + x for x in ids])
        prompt_mask = torch.tensor([[0] * (T - len(x)) + [1] * len(x) for x in ids])
        return prompt_ids, prompt_mask  # (P, T) each, left-padded

    def _batch_prompts(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Train prompts `idx`, left-padded to the longest of them: (P, T) ids and mask."""
        if self._padded_train is None:
            return self._pad_prompts([self.train_prompt_ids[i] for i in idx])
        ids, mask, lengths = self._padded_train
        rows = torch.tensor(idx)
        T = int(lengths[rows].max())
        return ids[rows, -T:], mask[rows, -T:]

    # ------------------------------------------------------------------ one step
    def _generate_and_score(self, idx: list[int]) -> tuple[Batch, dict]:
        """Rollout G completions for each prompt, score them, and compute advantages over the global batch."""
        cfg, G = self.cfg, self.G
        t0 = time.perf_counter()
        prompt_ids, prompt_mask = self._batch_prompts(idx)
        model = self.policy
        # Sampling runs in eval mode; the grouped fast path, when the model supports it now, has no dropout and
        # computes the same in either mode, so the switch (a walk over every module) is not needed.
        switch = not uses_grouped_path(model, self.grouped)
        was_training = model.training
        if switch:
            self._set_training(False)
        ro = sample_completions(
            model, prompt_ids, prompt_mask, G, cfg.max_completion_length, self.tokenizer.eos_token_id,
            self.tokenizer.pad_token_id, cfg.temperature, cfg.top_k, cfg.top_p, self.sample_gen, self.grouped,
        )  # fmt: skip
        if switch:
            self._set_training(was_training)
        completion_ids = ro.completion_ids.clone()  # out of inference mode: autograd may save it
        completion_mask = ro.completion_mask.float()
        is_eos = ro.is_eos.clone()
        t1 = time.perf_counter()

        lengths = ro.completion_mask.sum(1)  # (N,) tokens per completion, EOS included
        ids = [row[:n] for row, n in zip(completion_ids.tolist(), lengths.tolist(), strict=True)]
        completions = decode_rows(self.tokenizer, ids, self._decoded)
        prompts = [self.train_prompts[i] for i in idx for _ in range(G)]
        columns = {c: [self.train_columns[c][i] for i in idx for _ in range(G)] for c in self.columns}
        per_func = compute_rewards(self.reward_funcs, self.reward_names, prompts, completions, ids, columns,
                                   self._reward_kwargs()).astype(np.float32)  # (N, F), NaN = None  # fmt: skip
        rewards = torch.from_numpy(combine_rewards(per_func, self.reward_weights).astype(np.float32))  # (N,)
        per_func = torch.from_numpy(per_func)
        t2 = time.perf_counter()

        # Advantages on the GLOBAL batch (exact for scale_rewards="batch"); each process keeps its own rows.
        all_rewards = self._gather(rewards)
        adv, zero_std = group_advantages(all_rewards, G, mode=cfg.advantage_mode, scale_rewards=cfg.scale_rewards)
        n = rewards.numel()
        r = self.acc.process_index
        advantages = adv[r * n : (r + 1) * n].contiguous()
        if cfg.mask_truncated_completions:
            completion_mask = completion_mask * is_eos[:, None]
        batch = Batch(prompt_ids, prompt_mask, completion_ids, completion_mask, advantages, rewards)
        info = {
            "per_func": per_func, "completions": completions, "prompts": prompts, "is_eos": is_eos,
            "zero_std_global": zero_std, "all_rewards": all_rewards, "idx": idx,
            "has_signal": ~zero_std[r * len(idx) : (r + 1) * len(idx)],  # (P,) this process's groups
            "lengths": lengths,
            "time_generate": t1 - t0, "time_reward": t2 - t1,
        }  # fmt: skip
        return batch, info

    def _collect_batch(self) -> tuple[Batch, dict]:
        """One generated batch; with dynamic sampling, zero-variance groups are dropped and refilled (bounded)."""
        cfg, G = self.cfg, self.G
        batch, info = self._generate_and_score(self._local_prompts())
        if not cfg.dynamic_sampling:
            return batch, info
        target = batch.prompt_ids.size(0)
        parts, infos = [], [info]
        # "Signal" is the core's notion: not a zero-variance group (None rewards excluded from the variance).
        kept = batch.groups(torch.nonzero(info["has_signal"]).flatten(), G)
        parts.append(kept)
        have = kept.prompt_ids.size(0)
        for _ in range(cfg.max_dynamic_sampling_rounds):
            need = torch.tensor(float(have < target))
            if self._reduce(need, "max").item() == 0:  # every process is full
                break
            b, inf = self._generate_and_score(self._local_prompts())
            infos.append(inf)
            sel = torch.nonzero(inf["has_signal"]).flatten()[: max(0, target - have)]
            parts.append(b.groups(sel, G))
            have += sel.numel()
        if have == 0:  # nothing with signal in any round: keep one group as a zero-weight placeholder
            parts = [batch.groups(torch.zeros(1, dtype=torch.long), G)]
            parts[0].empty = True
        info["dynamic_sampling_rounds"] = len(infos) - 1
        info["num_sampled"] = sum(len(i["all_rewards"]) for i in infos)
        info["time_generate"] = sum(i["time_generate"] for i in infos)
        info["time_reward"] = sum(i["time_reward"] for i in infos)
        return concat_batches(parts, self.tokenizer.pad_token_id), info

    @torch.inference_mode()
    def _add_ref_and_old_logps(self, batch: Batch, groups: torch.Tensor) -> None:
        """Reference log-probs (beta > 0) and old log-probs (if the policy moves within the batch), in place."""
        cfg, G = self.cfg, self.G
        if not groups.numel():
            return
        sub = batch.groups(groups, G)
        rows = None if sub is batch else (groups[:, None] * G + torch.arange(G)).reshape(-1)

        def place(values: torch.Tensor) -> torch.Tensor:  # the sub-batch's rows in a batch-sized tensor
            if rows is None:
                return values
            out = values.new_zeros(batch.completion_ids.shape + values.shape[2:])
            out[rows] = values
            return out

        if self.ref_model is not None:
            logits = completion_logits(self.ref_model, sub.prompt_ids, sub.prompt_mask, sub.completion_ids, G,
                                       sub.completion_mask, self.grouped)  # fmt: skip
            batch.ref_logps = place(selective_log_softmax(logits, sub.completion_ids, cfg.temperature))
            if cfg.kl_estimator == "full":
                batch.ref_logits = place(logits.float())
        if cfg.needs_old_logps:
            logits = completion_logits(self.policy, sub.prompt_ids, sub.prompt_mask, sub.completion_ids, G,
                                       sub.completion_mask, self.grouped)  # fmt: skip
            batch.old_logps = place(selective_log_softmax(logits, sub.completion_ids, cfg.temperature))

    def training_step(self) -> dict[str, float]:
        """Generate, score, compute advantages, optimize; returns this step's metrics (global)."""
        cfg, G = self.cfg, self.G
        t0 = time.perf_counter()
        batch, info = self._collect_batch()
        t1 = time.perf_counter()
        needs_aux = self.ref_model is not None or cfg.needs_old_logps
        if needs_aux:
            self._add_ref_and_old_logps(batch, self._active_groups(batch))
        t2 = time.perf_counter()
        m = self._optimize(batch)
        t3 = time.perf_counter()
        if cfg.sync_ref_model and (self.step + 1) % cfg.ref_model_sync_steps == 0:
            self._sync_ref()

        # Metrics of the generated batch, over all processes.
        all_rewards = info["all_rewards"]
        n_local = batch.completion_ids.size(0)
        completions_global = (int(self._reduce(torch.tensor(float(n_local)), "sum")) if self.acc.num_processes > 1
                              else n_local)  # fmt: skip
        sampled = info.get("num_sampled", len(all_rewards))  # every sampled completion, refills included
        self.total_completions += sampled
        lengths = self._gather(info["lengths"]).tolist()  # a few thousand ints at most: plain Python is cheaper
        truncated = self._gather((~info["is_eos"]).float())
        per_func = self._gather(info["per_func"])
        valid = all_rewards[~all_rewards.isnan()]
        m.update(reward_metrics(per_func.numpy(), self.reward_names))
        m.update({
            "reward": float(valid.mean()) if valid.numel() else 0.0,
            "reward_std": float(all_rewards.view(-1, G).nan_to_num(0).std(1).mean()),
            "frac_reward_zero_std": float(info["zero_std_global"].float().mean()),
            "completions/mean_length": sum(lengths) / len(lengths),
            "completions/min_length": float(min(lengths)),
            "completions/max_length": float(max(lengths)),
            "completions/clipped_ratio": float(truncated.mean()),
            "learning_rate": self.scheduler.get_last_lr()[0],
            "num_completions": self.total_completions,
            "trained_completions": completions_global,
        })  # fmt: skip
        if "accuracy" in self.reward_names:
            m["accuracy"] = m["rewards/accuracy/mean"]
        if "dynamic_sampling_rounds" in info:
            m["dynamic_sampling_rounds"] = info["dynamic_sampling_rounds"]
        if cfg.on_nonfinite == "skip":
            m["nonfinite_skipped"] = self.nonfinite_skipped
        if not cfg.needs_old_logps:
            m["ratio_is_exactly_one"] = 1  # mu = 1: the gradient is the plain policy gradient (see README)
        dt = t3 - t0
        m.update({
            "time/step": dt, "time/generate": info["time_generate"], "time/reward": info["time_reward"],
            "time/ref_old_logps": t2 - t1, "time/optimize": t3 - t2,
            "throughput/completions_per_s": sampled / dt,
            "throughput/tokens_per_s": sum(lengths) / dt,
        })  # fmt: skip
        self._last_info = info
        return m

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy (and pass@k) on the held-out split; every process gets the same numbers."""
        if self.eval_rows is None or "answer" not in self.eval_rows:
            return {}
        if self._eval_ids is None:  # tokenized and padded once, on first use
            self._eval_ids = self._pad_prompts(self.tokenizer(self.eval_rows["prompt"])["input_ids"])
        cfg = self.cfg
        return held_out_metrics(
            self.policy, self.tokenizer, *self._eval_ids, self.eval_rows["answer"],
            max_new_tokens=cfg.max_completion_length, pass_k=cfg.eval_pass_k, temperature=cfg.temperature,
            top_k=cfg.top_k, top_p=cfg.top_p, seed=cfg.seed + 7919 * (self.step + 1), grouped=self.grouped,
        )  # fmt: skip

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        final = self.out / f"checkpoint-{self.step}"
        tmp = self.out / f".tmp-checkpoint-{self.step}"
        if self.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        self.acc.wait_for_everyone()
        self.acc.save_state(str(tmp), safe_serialization=True)
        r = self.acc.process_index
        ckpt.write_json_atomic(tmp / f"sampler_{r}.json", {"state": ckpt.generator_state_to_list(self.sample_gen)})
        self.acc.wait_for_everyone()
        if self.is_main:
            if self.ref_model is not None and self.cfg.sync_ref_model:
                save_file({k: v.contiguous() for k, v in self.ref_model.state_dict().items()},
                          str(tmp / "ref_model.safetensors"))  # fmt: skip
            ckpt.write_json_atomic(tmp / ckpt.STATE_FILE, {
                "step": self.step, "prompt_cursor": self.prompt_cursor, "total_completions": self.total_completions,
                "nonfinite_skipped": self.nonfinite_skipped, "num_processes": self.acc.num_processes,
                "scheduler": self.scheduler.state_dict(),
            })  # fmt: skip
            ckpt.publish(tmp, final)
            ckpt.prune(self.out, self.cfg.save_total_limit)
        self.acc.wait_for_everyone()
        return final

    def load_checkpoint(self, path: Path) -> None:
        import json

        state = json.loads((path / ckpt.STATE_FILE).read_text())
        if state["num_processes"] != self.acc.num_processes:
            raise ConfigError(
                f"checkpoint {path} was written by {state['num_processes']} processes; resume with the same number "
                f"(this launch has {self.acc.num_processes})"
            )
        self.acc.load_state(str(path))
        self.scheduler.load_state_dict(state["scheduler"])
        sampler = json.loads((path / f"sampler_{self.acc.process_index}.json").read_text())
        ckpt.generator_state_from_list(self.sample_gen, sampler["state"])
        if self.ref_model is not None and (path / "ref_model.safetensors").is_file():
            self.ref_model.load_state_dict(load_file(str(path / "ref_model.safetensors")))
        self.step = state["step"]
        self.prompt_cursor = state["prompt_cursor"]
        self.total_completions = state["total_completions"]
        self.nonfinite_skipped = state["nonfinite_skipped"]

    # ------------------------------------------------------------------ the loop
    def _on_sigint(self, signum, frame) -> None:
        if self._stop_requested:
            raise KeyboardInterrupt  # second Ctrl-C: stop now, without a checkpoint
        self._stop_requested = True
        if self.is_main:
            tqdm.write("Ctrl-C: stopping after this step and saving a checkpoint (press again to abort)")

    def log(self, metrics: dict) -> None:
        row = {"step": self.step, **metrics}
        self.metrics_log.write(row)
        if self.cfg.report_to != "none":
            self.acc.log(metrics, step=self.step)

    def _log_completions(self) -> None:
        info, k = self._last_info, self.cfg.num_completions_to_log
        per_func = info["per_func"]
        for i in range(min(k, len(info["completions"]))):
            self.completions_log.write({
                "step": self.step, "prompt": info["prompts"][i], "completion": info["completions"][i],
                "rewards": {n: (None if math.isnan(v) else v) for n, v in zip(self.reward_names, per_func[i].tolist(),
                                                                              strict=True)},
            })  # fmt: skip

    def train(self) -> dict:
        """Run to max_steps; returns a summary (held-out accuracy before/after, wall time)."""
        cfg = self.cfg
        t_start = time.perf_counter()
        if cfg.resume_from_checkpoint:
            path = ckpt.resolve_checkpoint(cfg.resume_from_checkpoint, self.out)
            self.load_checkpoint(path)
            for name in ("metrics.jsonl", "completions.jsonl"):
                if self.is_main:
                    truncate_after_step(self.out / name, self.step)
            self.acc.print(f"resumed from {path} at step {self.step}")
        if cfg.report_to != "none":
            self.acc.init_trackers("tinygrpo")
        if not cfg.needs_old_logps:
            self.acc.print("num_iterations=1, one mini-batch: the ratio is exactly 1, so the clip never acts and the "
                           "gradient is the policy gradient; the loss value itself hovers near 0 (see README).")
        first_eval = {}
        if self.step == 0:
            first_eval = self.evaluate()
            if first_eval:
                self.log(first_eval)
        summary = {"eval_before": first_eval}
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=cfg.disable_tqdm or not self.is_main,
                   desc="grpo", dynamic_ncols=True)  # fmt: skip
        # Ctrl-C asks for a stop at the next step boundary (a checkpoint there is exact); a second one is hard.
        self._stop_requested = False
        previous = signal.getsignal(signal.SIGINT)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._on_sigint)
        m: dict = {}
        try:
            while self.step < cfg.max_steps:
                m = self.training_step()
                self.step += 1
                if self.step % cfg.eval_steps == 0 or self.step == cfg.max_steps:
                    m.update(self.evaluate())
                if self.step % cfg.logging_steps == 0 or self.step == cfg.max_steps or "eval/accuracy" in m:
                    self.log(m)
                    if self.step % cfg.logging_steps == 0:
                        self._log_completions()
                post = {"reward": f"{m['reward']:.3f}"}
                if "eval/accuracy" in m:
                    self._last_eval = m["eval/accuracy"]
                if getattr(self, "_last_eval", None) is not None:
                    post["held_out"] = f"{self._last_eval:.3f}"
                bar.set_postfix(post, refresh=False)
                bar.update(1)
                stop = torch.tensor(float(self._stop_requested))
                if self.acc.num_processes > 1:
                    stop = self._reduce(stop, "max")  # every process stops at the same step
                if stop.item() > 0:
                    break
                if cfg.save_steps and self.step % cfg.save_steps == 0 and self.step < cfg.max_steps:
                    self.save_checkpoint()
        finally:
            bar.close()
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)
        wall = time.perf_counter() - t_start
        self.save_checkpoint()
        if self._stop_requested or self.step < cfg.max_steps:
            raise KeyboardInterrupt(
                f"interrupted after step {self.step}; checkpoint saved in {self.out}. Resume with the same command "
                f"plus --resume_from_checkpoint latest"
            )
        summary.update({"eval_after": {k: v for k, v in m.items() if k.startswith("eval/")}, "steps": self.step,
                        "wall_seconds": wall, "num_completions": self.total_completions})  # fmt: skip
        if self.is_main:
            final = self.policy
            final.save_pretrained(self.out / "final")
            self.tokenizer.save_pretrained(self.out / "final")
            if cfg.make_plots:
                plot_metrics(self.out / "metrics.jsonl", self.out / "plots.png")
        if cfg.report_to != "none":
            self.acc.end_training()
        self.acc.wait_for_everyone()
        return summary
