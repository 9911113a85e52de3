"""One step's generated batch: sample G completions per prompt, score them, turn rewards into advantages.

    prompts (PromptSource: uniform, or weighted by per-prompt pass rates) -> sample_completions -> decode
        -> reward functions -> weighted sum -> advantages over the GLOBAL batch (rewards gathered from every
        process) -> Batch; the per-prompt statistics fold in the round's global rewards
    [explore rounds: prompts whose G samples all scored below the batch's best, sampled again at higher temperatures
     until their group has signal (bounded)]
    [dynamic sampling (DAPO): drop zero-variance groups, refill from fresh prompts, at most N extra rounds]

The result is a `ScoredBatch`: the groups the update trains on, plus the first round's samples and rewards, which
describe the step (refills and explore rounds are chosen for their signal and would bias them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial

import torch
import torch.nn as nn

from rewards import EOS, RewardError, check_binary, compute_rewards, rewards_float32

from . import checkpoint as ckpt
from .advantage_estimators import (
    ADV_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    needs_binary_rewards,
)
from .allocation import knapsack_units, pass_rate_estimates
from .backend import Backend
from .batch import Batch, concat_batches
from .config import GRPOConfig
from .core import selective_log_softmax
from .distributed import Processes
from .forecast import SignalForecast, forecast_signal
from .group_sizes import group_reduce, group_starts, rows_of, sized_advantages
from .prompt_stats import PromptStats
from .prompts import PromptSource
from .rollout import Rollout, SamplingParams, decode_rows, sample_completions
from .round import Round
from .sampling_passes import screen, until_signal
from .tool_calls import ToolUse, policy_mask


class RewardFailure(RewardError):
    """A reward function failed on a round's samples (it raised, or returned a value the run cannot use): the trainer
    adds the step and the checkpoint to resume from."""


@dataclass(frozen=True)
class RewardSpec:
    """Resolved reward functions (TRL's calling convention), their names and weights, and the trainer keywords
    every function may ask for."""

    funcs: list
    names: list[str]
    weights: list[float]
    kwargs: dict


@dataclass
class ScoredBatch:
    """What one step trains on, and what it sampled to get there."""

    batch: Batch  # the groups the update trains on (after dynamic sampling's refills)
    first: Round  # the first round: the step's sample statistics
    num_sampled: int  # completions sampled in every round, over all processes
    refill_rounds: int | None  # dynamic sampling's extra rounds (None when it is off)
    seconds_generate: float  # over all rounds
    seconds_reward: float


class BatchGenerator:
    """Generates and scores one step's batch. Owns the state of what it samples: the sampling generator (one per
    process), the prompt order (PromptSource) and the per-prompt statistics (PromptStats): see state_dict."""

    def __init__(
        self,
        cfg: GRPOConfig,
        model: nn.Module,
        backend: Backend,
        tokenizer,
        prompts: PromptSource,
        rewards: RewardSpec,
        processes: Processes,
        stats: PromptStats | None = None,
        ref_model: nn.Module | None = None,
        tools: ToolUse | None = None,
    ) -> None:
        self.cfg, self.model, self.backend, self.tokenizer = cfg, model, backend, tokenizer
        self.prompts, self.rewards, self.procs = prompts, rewards, processes
        self.G = cfg.num_generations
        self.unit = cfg.unit  # completions per prompt row: G, or allocation_unit (sample_allocation)
        self.generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + processes.rank)
        self._decoded: dict[tuple[int, ...], str] = {}  # completion ids -> text, see decode_rows
        self.rewarded = False  # some reward function has applied to some sample of this run
        self.stats = stats  # per-prompt pass rates, updated by every base-temperature round (None: not kept)
        self.ref_model = ref_model  # use_kl_in_reward: the reference whose KL each reward pays
        self.tools = tools  # an environment the policy calls (tinygrpo/tool_calls.py), or None
        self.adv_cfg = AdvantageConfig.from_config(cfg, rewards.weights)
        # What the estimator reads beyond the rewards: gathered over processes, and computed, only then. (GDPO's
        # normalise-then-sum replaces the estimator and reads each function's rewards.)
        self.gdpo = cfg.multi_objective_aggregation == "normalize_then_sum"
        self.adv_needs = () if self.gdpo else ADV_ESTIMATORS[cfg.advantage_mode].needs
        # The estimator is defined on 0/1 rewards: every round's are checked (one line, not a traceback mid-run).
        self.binary_rewards = needs_binary_rewards(cfg)

    def state_dict(self) -> dict:
        """This process's sampling state: the generator's RNG, the prompt order's cursor and (tensors) the
        per-prompt statistics. Restored exactly, a resumed run samples what the uninterrupted one would have."""
        stats = {} if self.stats is None else self.stats.state_dict()
        return {
            "sampler": ckpt.generator_state_to_list(self.generator),
            **self.prompts.state_dict(),
            "stats": stats,
        }

    def load_state_dict(self, state: dict) -> None:
        ckpt.generator_state_from_list(self.generator, state["sampler"])
        self.prompts.load_state_dict(state)
        if self.stats is not None:
            self.stats.load_state_dict(state["stats"])

    def generate(self) -> ScoredBatch:
        """One batch. Explore rounds resample the failed prompts at higher temperatures; dynamic sampling drops the
        zero-variance groups left and refills from fresh prompts (both bounded)."""
        cfg = self.cfg
        first = self.round()
        rounds = [first]
        batch = first.batch
        explored: list[Round] = []  # the explore rounds (this process's)
        if cfg.explore_rounds or cfg.dynamic_sampling:
            # (prompt rows: P, or the P x G / allocation_unit units of a rule that gives prompts several, whatever
            # the first round sampled: a screen samples fewer)
            target = cfg.generation_size // self.unit
            # Dynamic sampling keeps only the groups with signal; without it the whole first batch is trained on.
            kept = (
                first.batch.groups(torch.nonzero(first.has_signal).flatten())
                if cfg.dynamic_sampling
                else batch
            )
            parts, have = [kept], kept.num_groups
            if cfg.explore_rounds:
                found, explored = self.explore(first)
                parts += found
                have += sum(f.num_groups for f in found)
            for _ in range(cfg.max_dynamic_sampling_rounds if cfg.dynamic_sampling else 0):
                if not self.procs.any(have < target):  # every process is full
                    break
                r = self.round()
                rounds.append(r)
                sel = signal_rows(r, max(0, target - have))
                parts.append(r.batch.groups(sel))
                have += sel.numel()
            if have == 0:  # nothing with signal in any round: one group, kept for DDP's forward (no_signal)
                parts = [replace(first.batch.groups(torch.zeros(1, dtype=torch.long)), no_signal=True)]
            parts = [p for p in parts if p.num_groups]
            batch = (
                concat_batches(parts, self.tokenizer.pad_token_id, cfg.temperature)
                if len(parts) > 1
                else parts[0]
            )
        timed = [*rounds, *explored]
        return ScoredBatch(
            batch=batch,
            first=first,
            num_sampled=sum(len(r.all_rewards) for r in rounds)
            + (int(self.procs.sum(sum(s.rewards.numel() for s in explored))) if cfg.explore_rounds else 0),
            refill_rounds=len(rounds) - 1 if cfg.dynamic_sampling else None,
            seconds_generate=sum(r.seconds_generate for r in timed),
            seconds_reward=sum(r.seconds_reward for r in timed),
        )

    def explore(self, first: Round) -> tuple[list[Batch], list[Round]]:
        """Adaptive resampling of failed prompts (Reinforce-Ada, Xiong et al. 2025, with a temperature schedule):
        a prompt of the first round whose G samples all scored the same and below the batch's best is sampled again,
        G at a time at the next of `explore_temperatures`, until a round gives it a group whose rewards differ (that
        group is trained on, its advantages computed within the group) or the temperatures are used up. Local to
        this process: each process explores its own prompts. Returns the groups found and each round's samples."""
        cfg, G, U = self.cfg, self.G, self.unit
        best = float(first.all_rewards.nan_to_num(float("-inf")).max())
        top = group_reduce(first.rewards.nan_to_num(float("-inf")), first.sizes, U, "amax")  # (groups,)
        heads = torch.arange(len(first.idx)) if first.sizes is None else group_starts(first.sizes, 1)
        todo = torch.nonzero(
            ~first.has_signal[heads] & (top < best)
        ).flatten()  # this process's failed groups
        idx = [first.idx[i] for i in heads[todo].tolist()]
        found: list[Batch] = []
        rounds: list[Round] = []
        for k in range(cfg.explore_rounds):
            temperature = cfg.explore_temperatures[min(k, len(cfg.explore_temperatures) - 1)]
            if not idx:
                break
            s = self.sample(idx, temperature, None if U == G else [G // U] * len(idx))  # G samples a prompt
            rounds.append(s)
            # Within the round (its groups are this process's own), so scale_rewards "batch" falls back to "group".
            scale = "group" if cfg.scale_rewards == "batch" else cfg.scale_rewards
            s.advantages, s.zero_std = self.advantages(s.shaped_rewards(cfg.beta), s, scale, sizes=s.sizes)
            hit = torch.nonzero(~s.zero_std).flatten()
            if hit.numel():
                b = replace(s.batch, temperature=torch.full((len(idx) * G,), temperature))
                found.append(b.groups(hit if s.sizes is None else rows_of(hit, s.sizes, 1)))
            hits = set(hit.tolist())
            idx = [i for j, i in enumerate(idx) if j not in hits]
        return found, rounds

    def sample(self, idx: list[int], temperature: float, sizes: list[int] | None = None) -> Round:
        """U completions of each of the prompts `idx` (this process's), decoded and scored; with `sizes`, prompt
        idx[j] is sizes[j] consecutive prompt rows (its group: sizes[j] * U completions)."""
        cfg, U = self.cfg, self.unit
        if sizes is not None:
            idx = [i for i, k in zip(idx, sizes, strict=True) for _ in range(k)]
        t0 = time.perf_counter()
        prompt_ids, prompt_mask, ro = self._rollout(idx, temperature, self.generator, U)
        completion_ids = ro.completion_ids.clone()  # out of inference mode: autograd may save it
        completion_mask = ro.completion_mask.float()
        is_eos = ro.is_eos.clone()
        t1 = time.perf_counter()

        lengths = ro.completion_mask.sum(1)  # (n,) tokens per completion, EOS included
        prompts, completions, per_func, rewards = self.score(idx, completion_ids, lengths, U)
        greedy = (
            self.greedy_rewards(idx, prompt_ids, prompt_mask) if "greedy_rewards" in self.adv_needs else None
        )
        t2 = time.perf_counter()
        if cfg.mask_truncated_completions:  # DAPO: a truncated completion says nothing about its answer
            completion_mask = completion_mask * is_eos[:, None]
        tool_mask = None if ro.tool_mask is None else ro.tool_mask.clone()  # (out of inference mode)
        completion_mask = policy_mask(
            completion_mask, tool_mask
        )  # (the environment's tokens: not the policy's)
        kl = None
        if self.ref_model is not None:
            kl = self.sequence_kl(prompt_ids, prompt_mask, completion_ids, completion_mask)
        return Round(
            idx,
            prompt_ids,
            prompt_mask,
            completion_ids,
            completion_mask,
            is_eos,
            lengths,
            prompts,
            completions,
            per_func,
            rewards,
            t1 - t0,
            t2 - t1,
            greedy,
            kl,
            sizes,
            tool_mask,
            ro.tool_calls,
            ro.tool_failures,
        )

    def forecast(self, count: int, verifier) -> SignalForecast:
        """The signal forecast (tinygrpo/forecast.py): G completions of `count` training prompts drawn uniformly,
        sampled from the current policy at the run's temperature and scored by the run's rewards and by `verifier`.
        Its prompts and samples come from generators of their own, seeded by the run's seed: the training RNG does not
        move, so a run samples what it would without the forecast. Every process computes the same forecast."""
        cfg, G = self.cfg, self.G
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 104_729)
        order = torch.randperm(len(self.prompts), generator=gen)[: min(count, len(self.prompts))]
        idx = sorted(order.tolist())
        _, _, ro = self._rollout(idx, cfg.temperature, gen, G)
        _, completions, _, rewards = self.score(idx, ro.completion_ids, ro.completion_mask.sum(1), G)
        # (what the first round would find: said before it, as it would say it)
        if bool(rewards.isnan().all()):
            raise RewardError(no_reward_applies(rewards.numel(), self.rewards.names))
        rows = {c: [v[i] for i in idx] for c, v in self.prompts.columns.items()}
        right = (
            torch.tensor(verifier(completions, rows, k=G))
            if "answer" in rows
            else torch.zeros(len(completions))
        )
        return forecast_signal(rewards, right, G, time.perf_counter() - t0)

    def _rollout(
        self, idx: list[int], temperature: float, generator: torch.Generator, reps: int
    ) -> tuple[torch.Tensor, torch.Tensor, Rollout]:
        """`reps` completions of each of the prompts `idx`, drawn from `generator`: the prompts (left-padded, on the
        model's device) and the rollout."""
        cfg = self.cfg
        device = next(self.model.parameters()).device  # (prompts are tokenized on the CPU; a no-op there)
        prompt_ids, prompt_mask = (t.to(device) for t in self.prompts.batch(idx))
        params = SamplingParams(cfg.max_completion_length, temperature, cfg.top_k, cfg.top_p, generator)
        ro = sample_completions(
            self.model,
            prompt_ids,
            prompt_mask,
            reps,
            params,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            backend=self.backend,
            tools=self.tools,
        )
        return prompt_ids, prompt_mask, ro

    def score(
        self, idx: list[int], completion_ids: torch.Tensor, lengths: torch.Tensor, reps: int
    ) -> tuple[list[str], list[str], torch.Tensor, torch.Tensor]:
        """Decode and score `reps` completions of each prompt of `idx` (rows grouped by prompt): each row's prompt
        and completion text, the (n, F) float32 rewards of each function (NaN = None) and their (n,) weighted sum."""
        ids = [row[:n] for row, n in zip(completion_ids.tolist(), lengths.tolist(), strict=True)]
        completions = decode_rows(self.tokenizer, ids, self._decoded)
        prompts = [self.prompts.texts[i] for i in idx for _ in range(reps)]
        columns = {c: [v[i] for i in idx for _ in range(reps)] for c, v in self.prompts.columns.items()}
        rw = self.rewards
        try:
            per_func = compute_rewards(rw.funcs, rw.names, prompts, completions, ids, columns, rw.kwargs)
            per32, total = rewards_float32(per_func, rw.weights, rw.names, completions)  # (n, F), (n,)
            if self.binary_rewards:
                who = f"advantage_mode {self.cfg.advantage_mode}"
                check_binary(total, per_func, rw.weights, rw.names, completions, who)
        except RewardError as e:
            raise RewardFailure(str(e)) from e
        return prompts, completions, torch.from_numpy(per32), torch.from_numpy(total)

    @torch.inference_mode()
    def sequence_kl(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """(n,) sum over each completion's tokens of k1 = log pi(y_t) - log pi_ref(y_t), at the run's temperature:
        an unbiased estimate of the sequence KL(pi || pi_ref) (use_kl_in_reward)."""
        layout = self.backend.layout(self.model, prompt_ids, prompt_mask, ids, self.unit, mask)
        t = self.cfg.temperature
        logp = selective_log_softmax(self.backend.logits(self.model, layout), ids, t)
        ref = selective_log_softmax(self.backend.logits(self.ref_model, layout), ids, t)
        # On the CPU beside the rewards; a copy, so that it leaves inference mode.
        return ((logp - ref) * mask).sum(1).to("cpu", copy=True)

    def greedy_rewards(
        self, idx: list[int], prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
    ) -> torch.Tensor:
        """(P,) the reward of each prompt's greedy completion: ReMax's baseline (does not draw from the generator)."""
        ro = sample_completions(
            self.model,
            prompt_ids,
            prompt_mask,
            1,
            SamplingParams.greedy(self.cfg.max_completion_length),
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            backend=self.backend,
        )
        return self.score(idx, ro.completion_ids, ro.completion_mask.sum(1), 1)[3]

    def advantages(
        self,
        rewards: torch.Tensor,
        s: Round,
        scale_rewards: str,
        gather=lambda t: t,
        sizes: list[int] | None = None,
        gather_units=None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The registered estimator's advantages of `rewards` (the shaped rewards of `s`, gathered or local) and each
        group's zero_std, for groups of `sizes` prompt rows (None: one each); of the rest of `s` only what the
        estimator needs is gathered."""
        needs = self.adv_needs
        x = AdvantageInputs(
            rewards,
            lengths=gather(s.completion_mask.sum(1).cpu()) if "lengths" in needs else None,
            greedy_rewards=(gather_units or gather)(s.greedy_rewards) if "greedy_rewards" in needs else None,
            rewards_per_func=gather(s.rewards_per_func) if self.gdpo else None,
        )
        cfg = self.adv_cfg
        cfg = cfg if scale_rewards == cfg.scale_rewards else replace(cfg, scale_rewards=scale_rewards)
        return sized_advantages(x, cfg, sizes, self.unit)

    def round(self) -> Round:
        """This process's share of the next global prompts, each sampled G times (or as sample_allocation says);
        advantages on the global batch."""
        cfg = self.cfg
        global_idx = self._global_prompts()
        per_proc = len(global_idx) // self.procs.num
        r = self.procs.rank
        local = global_idx[r * per_proc : (r + 1) * per_proc]

        def sample(i: list[int], sizes: list[int] | None) -> Round:  # (for the rules that sample in passes)
            return self.sample(i, cfg.temperature, sizes)

        pad_id = self.tokenizer.pad_token_id
        if cfg.sample_allocation == "screen":
            s = screen(sample, local, cfg, self.stats.pass_rate, pad_id)
        elif cfg.sample_allocation == "until_signal":
            s = until_signal(sample, local, cfg, pad_id)
        else:
            s = self.sample(local, cfg.temperature, self.allocate(local))
        sizes, gather, gather_units, start = (
            s.sizes,
            self.procs.gather,
            self.procs.gather,
            r * s.rewards.numel(),
        )
        all_sizes = None
        if sizes is not None:  # every process's groups, in rank order (as many on each; rows may differ)
            all_sizes = self.procs.gather(torch.tensor(sizes)).tolist()
            units = [sum(all_sizes[i * per_proc : (i + 1) * per_proc]) for i in range(self.procs.num)]
            s.row_counts = [u * self.unit for u in units]
            gather = partial(self.procs.gather_rows, counts=s.row_counts)
            gather_units = partial(self.procs.gather_rows, counts=units)
            start = sum(units[:r]) * self.unit

        # Advantages on the GLOBAL batch (exact for scale_rewards="batch"); each process keeps its own rows.
        all_rewards = gather(s.rewards)
        if not self.rewarded and bool(all_rewards.isnan().all()):
            # Nothing has applied yet: a run on these rewards would train on nothing at all. (Later, a round whose
            # rewards all are None is a round without signal, like one whose rewards are all equal.)
            raise RewardError(no_reward_applies(all_rewards.numel(), self.rewards.names))
        shaped = all_rewards if s.kl is None else all_rewards - cfg.beta * gather(s.kl)
        adv, zero_std = self.advantages(shaped, s, cfg.scale_rewards, gather, all_sizes, gather_units)
        self.rewarded = True
        if self.stats is not None:
            self.stats.update(global_idx, all_rewards, self.unit, all_sizes)
        n, P = s.rewards.numel(), len(local)
        s.advantages = adv[start : start + n].contiguous()
        s.all_rewards, s.zero_std, s.all_sizes = all_rewards, zero_std, all_sizes
        signal = ~zero_std[r * P : (r + 1) * P]  # (P,) this process's groups
        s.has_signal = signal if sizes is None else signal.repeat_interleave(torch.tensor(sizes))
        return s

    def allocate(self, idx: list[int]) -> list[int] | None:
        """Prompt rows (units of allocation_unit samples) for each of this process's prompts `idx`, by
        sample_allocation (tinygrpo/allocation.py); None: G samples each (fixed). Every process's prompts share
        the same budget, len(idx) * G samples."""
        cfg = self.cfg
        if cfg.sample_allocation == "fixed":
            return None
        p = pass_rate_estimates(self.stats.pass_rate, self.stats.samples)[torch.tensor(idx)]
        budget = len(idx) * self.G // self.unit
        return knapsack_units(p, budget, self.unit, cfg.max_num_generations // self.unit)

    def _global_prompts(self) -> list[int]:
        """The next global batch of prompts (each process takes its share: whole groups)."""
        per_proc = self.cfg.generation_size // self.G
        return self.prompts.take(per_proc * self.procs.num)


def signal_rows(r: Round, room: int) -> torch.Tensor:
    """This process's prompt rows of `r` whose group has signal, whole groups in order, until `room` rows are
    filled (the last group may go past it: a group is never cut, and a round that has a group with signal always
    adds one)."""
    if r.sizes is None:
        return torch.nonzero(r.has_signal).flatten()[:room]
    with_signal = torch.nonzero(r.has_signal[group_starts(r.sizes, 1)]).flatten()  # (groups)
    size = torch.tensor(r.sizes)[with_signal]
    before = torch.cumsum(size, 0) - size  # rows taken before each group
    return rows_of(with_signal[before < room], r.sizes, 1)


def no_reward_applies(samples: int, names: list[str]) -> str:
    """The error of a run whose reward functions apply to none of its first samples."""
    return (
        f"no reward function applies to any of the {samples} samples (every reward is None): nothing to learn "
        f"from; check the reward functions ({', '.join(names)}) and the dataset's columns"
    )


def reward_spec(funcs: list, names: list[str], weights: list[float], cfg: GRPOConfig) -> RewardSpec:
    """The trainer keywords passed to every reward function: max_completion_length and the EOS text."""
    return RewardSpec(funcs, names, weights, {"max_completion_length": cfg.max_completion_length, "eos": EOS})
