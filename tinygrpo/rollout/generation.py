"""One step's rollout, in the calls the trainer makes in order (GRPOTrainer.training_step):

    sample_round()     the next global prompts (this process's share; PromptSource: uniform, or weighted by
                       per-prompt pass rates), G completions of each: the sample_allocation rule's (ALLOCATION_RULES)
    score(round)       every completion's text and rewards (tinygrpo/rollout/scoring.py)
    advantages(round)  group-relative advantages over the GLOBAL batch (rewards gathered from every process); the
                       per-prompt statistics fold in the round's rewards
    refill(round)      rounds beyond the first where a variant adds them (tinygrpo/rollout/refill.py): the step's
                       ScoredBatch

`generate()` is the four in one call. BatchGenerator owns the state of what it samples (state_dict).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import torch
import torch.nn as nn

from rewards import RewardError
from tinygrpo.algorithm.advantage_estimators import (
    ADV_ESTIMATORS,
    AdvantageConfig,
    AdvantageInputs,
    compute_advantages,
)
from tinygrpo.algorithm.allocation import knapsack_units, pass_rate_estimates
from tinygrpo.algorithm.core import selective_log_softmax
from tinygrpo.algorithm.forecast import SignalForecast, forecast_signal
from tinygrpo.algorithm.group_sizes import sized_advantages
from tinygrpo.base.processes import Processes
from tinygrpo.model.backend import Backend
from tinygrpo.model.static_shapes import replayed
from tinygrpo.rollout.config import RolloutConfig, SamplingParams
from tinygrpo.rollout.passes import screen, until_signal
from tinygrpo.rollout.prompts import PromptSource, PromptStats
from tinygrpo.rollout.refill import Refill
from tinygrpo.rollout.round import Round, ScoredBatch
from tinygrpo.rollout.sampling import Rollout, sample_completions
from tinygrpo.rollout.scoring import RewardFailure, RewardSpec, Scorer, no_reward_applies, reward_spec
from tinygrpo.rollout.static_decode import sample_static
from tinygrpo.rollout.tool_calls import ToolUse, policy_mask

__all__ = ["BatchGenerator", "RewardFailure", "RewardSpec", "ScoredBatch", "reward_spec"]


class BatchGenerator:
    """Samples, scores and computes the advantages of one step's batch. Owns the state of what it samples: the
    sampling generator (one per process), the prompt order (PromptSource) and the per-prompt statistics
    (PromptStats): see state_dict."""

    def __init__(
        self,
        cfg: RolloutConfig,
        sampling: SamplingParams,
        advantages: AdvantageConfig,
        model: nn.Module,
        backend: Backend,
        tokenizer,
        prompts: PromptSource,
        rewards: RewardSpec,
        processes: Processes,
        *,
        seed: int,
        generation_size: int,
        stats: PromptStats | None = None,
        ref_model: nn.Module | None = None,
        beta: float = 0.0,
        tools: ToolUse | None = None,
        static: bool = False,
    ) -> None:
        self.cfg, self.sampling, self.adv_cfg, self.seed = cfg, sampling, advantages, seed
        self.model, self.backend, self.tokenizer = model, backend, tokenizer
        self.prompts, self.rewards, self.procs = prompts, rewards, processes
        self.G, self.generation_size = cfg.num_generations, generation_size
        self.unit = cfg.unit  # completions per prompt row: G, or allocation_unit (sample_allocation)
        self.generator = torch.Generator().manual_seed(seed * 1_000_003 + processes.rank)
        self.rewarded = False  # some reward function has applied to some sample of this run
        self.stats = stats  # per-prompt pass rates, updated by every base-temperature round (None: not kept)
        # use_kl_in_reward: the reference whose KL each reward pays, beta times over
        self.ref_model, self.beta = ref_model, beta
        self.tools = tools  # an environment the policy calls (tinygrpo/rollout/tool_calls.py), or None
        # What the estimator reads beyond the rewards: gathered over processes, and computed, only then. (GDPO's
        # normalise-then-sum replaces the estimator and reads each function's rewards.)
        self.gdpo = advantages.multi_objective_aggregation == "normalize_then_sum"
        self.adv_needs = () if self.gdpo else ADV_ESTIMATORS[advantages.advantage_mode].needs
        # The estimator is defined on 0/1 rewards: every round's are checked (one line, not a traceback mid-run).
        binary_for = f"advantage_mode {advantages.advantage_mode}" if advantages.binary_rewards else None
        self.scorer = Scorer(rewards, tokenizer, binary_for)
        target = generation_size // self.unit
        pad, scale = tokenizer.pad_token_id, advantages.scale_rewards
        self.refill = Refill(self, cfg, sampling.temperature, target, processes, pad, scale)
        # static shapes: the static decode; with cuda_graphs, the static backend's capture (CudaGraphs), so that the
        # decode's loop shares its memory pool and stream
        self.static, self.graphs = static, getattr(backend, "capture", None)

    def state_dict(self) -> dict:
        """This process's sampling state: the generator's RNG, the prompt order's cursor and (tensors) the
        per-prompt statistics. Restored exactly, a resumed run samples what the uninterrupted one would have."""
        stats = {} if self.stats is None else self.stats.state_dict()
        return {"sampler": self.generator.get_state().tolist(), **self.prompts.state_dict(), "stats": stats}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(torch.tensor(state["sampler"], dtype=torch.uint8))
        self.prompts.load_state_dict(state)
        if self.stats is not None:
            self.stats.load_state_dict(state["stats"])

    # ------------------------------------------------------------------ the step's calls, in order
    def generate(self) -> ScoredBatch:
        """One step's batch: the four calls of training_step in one."""
        return self.refill(self.round())

    def round(self) -> Round:
        """The next prompts, sampled, scored, with their advantages (a refill round of dynamic sampling too)."""
        r = self.sample_round()
        self.score(r)
        self.advantages(r)
        return r

    def sample_round(self) -> Round:
        """This process's share of the next global prompts, each sampled G times (or as sample_allocation says)."""
        global_idx = self.prompts.take(self.generation_size // self.G * self.procs.num)
        per_proc = len(global_idx) // self.procs.num
        local = global_idx[self.procs.rank * per_proc : (self.procs.rank + 1) * per_proc]
        r = ALLOCATION_RULES[self.cfg.sample_allocation](self, local)
        r.all_idx = global_idx
        return r

    def score(self, r: Round) -> Round:
        """Every completion's text and rewards (in place; a round a rule scored pass by pass is left as it is)."""
        if r.rewards is not None:  # (screen, until_signal: each pass's rewards decided the next pass)
            return r
        t0 = time.perf_counter()
        r.prompts, r.completions, r.rewards_per_func, r.rewards = self.scorer(
            self.prompts, r.idx, r.completion_ids, r.lengths, self.unit, r.environments
        )
        if "greedy_rewards" in self.adv_needs:
            r.greedy_rewards = self.greedy_rewards(r.idx, r.prompt_ids, r.prompt_mask)
        r.seconds_reward = time.perf_counter() - t0
        if self.ref_model is not None:
            r.kl = self.sequence_kl(r.prompt_ids, r.prompt_mask, r.completion_ids, r.completion_mask)
            r.penalty = self.beta * r.kl
        return r

    def advantages(self, r: Round) -> Round:
        """The registered estimator's advantages over the GLOBAL batch (exact for scale_rewards="batch"), each
        process keeping its own rows (in place); the per-prompt statistics fold in the round's global rewards."""
        rank = self.procs.rank
        sizes, start = r.sizes, rank * r.rewards.numel()
        gather = gather_units = self.procs.gather
        all_sizes = None
        P = len(r.idx) if sizes is None else len(sizes)  # this process's groups
        if sizes is not None:  # every process's groups, in rank order (as many on each; rows may differ)
            all_sizes = self.procs.gather(torch.tensor(sizes)).tolist()
            units = [sum(all_sizes[i * P : (i + 1) * P]) for i in range(self.procs.num)]
            r.row_counts = [u * self.unit for u in units]
            gather = partial(self.procs.gather_rows, counts=r.row_counts)
            gather_units = partial(self.procs.gather_rows, counts=units)
            start = sum(units[:rank]) * self.unit
        all_rewards = gather(r.rewards)
        if not self.rewarded and bool(all_rewards.isnan().all()):
            # Nothing has applied yet: a run on these rewards would train on nothing at all. (Later, a round whose
            # rewards all are None is a round without signal, like one whose rewards are all equal.)
            raise RewardError(no_reward_applies(all_rewards.numel(), self.rewards.names, self.failures()))
        shaped = all_rewards if r.penalty is None else all_rewards - gather(r.penalty)
        adv, zero_std = self.estimate(shaped, r, self.adv_cfg.scale_rewards, gather, all_sizes, gather_units)
        self.rewarded = True
        if self.stats is not None:
            self.stats.update(r.all_idx, all_rewards, self.unit, all_sizes)
        r.advantages = adv[start : start + r.rewards.numel()].contiguous()
        r.all_rewards, r.zero_std, r.all_sizes = all_rewards, zero_std, all_sizes
        signal = ~zero_std[rank * P : (rank + 1) * P]  # (P,) this process's groups
        r.has_signal = signal if sizes is None else signal.repeat_interleave(torch.tensor(sizes))
        return r

    def failures(self) -> str:
        """What the run's environment failed to answer so far, in words ("" without one, or none)."""
        return "" if self.tools is None else self.tools.failures()

    # ------------------------------------------------------------------ the parts
    def draw(self, idx: list[int], temperature: float, sizes: list[int] | None = None) -> Round:
        """U completions of each of the prompts `idx` (this process's), not yet scored; with `sizes`, prompt idx[j]
        is sizes[j] consecutive prompt rows (its group: sizes[j] * U completions)."""
        cfg, U = self.cfg, self.unit
        if sizes is not None:
            idx = [i for i, k in zip(idx, sizes, strict=True) for _ in range(k)]
        t0 = time.perf_counter()
        prompt_ids, prompt_mask, ro = self._rollout(idx, temperature, self.generator, U)
        completion_mask = ro.completion_mask.float()
        is_eos = ro.is_eos.clone()  # (out of inference mode: autograd may save what it touches)
        if cfg.mask_truncated_completions:  # DAPO: a truncated completion says nothing about its answer
            completion_mask = completion_mask * is_eos[:, None]
        tool_mask = None
        if ro.tool_mask is not None:  # the environment's tokens: read by the policy, not its own
            tool_mask = ro.tool_mask.clone()
            completion_mask = policy_mask(completion_mask, tool_mask)
        return Round(
            idx=idx,
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=ro.completion_ids.clone(),
            completion_mask=completion_mask,
            is_eos=is_eos,
            lengths=ro.completion_mask.sum(1),  # (n,) tokens per completion, EOS included
            seconds_generate=time.perf_counter() - t0,
            sizes=sizes,
            tool_mask=tool_mask,
            tool_calls=ro.tool_calls,
            tool_failures=ro.tool_failures,
            environments=ro.environments,
        )

    def sample(self, idx: list[int], temperature: float, sizes: list[int] | None = None) -> Round:
        """`draw`, then `score`: a round whose rewards a variant reads before the step goes on."""
        return self.score(self.draw(idx, temperature, sizes))

    def estimate(
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
            self.unit,
            lengths=gather(s.completion_mask.sum(1).cpu()) if "lengths" in needs else None,
            greedy_rewards=(gather_units or gather)(s.greedy_rewards) if "greedy_rewards" in needs else None,
            rewards_per_func=gather(s.rewards_per_func) if self.gdpo else None,
        )
        cfg = self.adv_cfg
        cfg = cfg if scale_rewards == cfg.scale_rewards else replace(cfg, scale_rewards=scale_rewards)
        if sizes is None:  # one prompt row a group: a uniform batch of G = unit
            return compute_advantages(x, cfg)
        return sized_advantages(x, cfg, sizes, self.unit)

    def allocate(self, idx: list[int]) -> list[int]:
        """sample_allocation knapsack (tinygrpo/algorithm/allocation.py): prompt rows (units of allocation_unit
        samples) for each of this process's prompts `idx`. Every process's prompts share the same budget, len(idx)
        * G samples."""
        p = pass_rate_estimates(self.stats.pass_rate, self.stats.samples)[torch.tensor(idx)]
        budget = len(idx) * self.G // self.unit
        return knapsack_units(p, budget, self.unit, self.cfg.max_num_generations // self.unit)

    def _rollout(
        self, idx: list[int], temperature: float, generator: torch.Generator, reps: int
    ) -> tuple[torch.Tensor, torch.Tensor, Rollout]:
        """`reps` completions of each of the prompts `idx`, drawn from `generator`: the prompts (left-padded, on the
        model's device) and the rollout."""
        device = next(self.model.parameters()).device  # (prompts are tokenized on the CPU; a no-op there)
        prompt_ids, prompt_mask = (t.to(device) for t in self.prompts.batch(idx))
        params = self.sampling
        if temperature != params.temperature:  # (an explore round's)
            params = replace(params, temperature=temperature)
        tools = None if self.tools is None else self.tools.with_rows(self.prompts.columns, idx)
        kw = dict(
            eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id, tools=tools
        )
        if self.static:
            ro = sample_static(
                self.model,
                prompt_ids,
                prompt_mask,
                reps,
                params,
                generator,
                backend=self.backend,
                capture=self.graphs,
                **kw,
            )
        else:
            ro = sample_completions(
                self.model, prompt_ids, prompt_mask, reps, params, generator, backend=self.backend, **kw
            )
        return prompt_ids, prompt_mask, ro

    @torch.inference_mode()
    def sequence_kl(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """(n,) sum over each completion's tokens of k1 = log pi(y_t) - log pi_ref(y_t), at the run's temperature:
        an unbiased estimate of the sequence KL(pi || pi_ref) (use_kl_in_reward)."""
        layout = self.backend.layout(self.model, prompt_ids, prompt_mask, ids, self.unit, mask)
        t = self.sampling.temperature
        with replayed(self.backend):  # (cuda_graphs: each a captured forward, replayed)
            logp = selective_log_softmax(self.backend.logits(self.model, layout), ids, t)
            ref = selective_log_softmax(self.backend.logits(self.ref_model, layout), ids, t)
        # On the CPU beside the rewards; a copy, so that it leaves inference mode.
        return ((logp - ref) * mask).sum(1).to("cpu", copy=True)

    def greedy_rewards(
        self, idx: list[int], prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
    ) -> torch.Tensor:
        """(P,) the reward of each prompt's greedy completion, the environment answering it as it answers the samples:
        ReMax's baseline (does not draw from the generator)."""
        ro = sample_completions(
            self.model,
            prompt_ids,
            prompt_mask,
            1,
            SamplingParams.greedy(self.sampling.max_completion_length),
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            backend=self.backend,
            tools=None if self.tools is None else self.tools.with_rows(self.prompts.columns, idx),
        )
        return self.scorer(
            self.prompts, idx, ro.completion_ids, ro.completion_mask.sum(1), 1, ro.environments
        )[3]

    def forecast(self, count: int, verifier) -> SignalForecast:
        """The signal forecast (tinygrpo/algorithm/forecast.py): G completions of `count` training prompts drawn
        uniformly, sampled from the current policy at the run's temperature and scored by the run's rewards and by
        `verifier`. Its prompts and samples come from generators of their own, seeded by the run's seed: the
        training RNG does not move, so a run samples what it would without the forecast. Every process computes the
        same forecast."""
        G = self.G
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + 104_729)
        order = torch.randperm(len(self.prompts), generator=gen)[: min(count, len(self.prompts))]
        idx = sorted(order.tolist())
        _, _, ro = self._rollout(idx, self.sampling.temperature, gen, G)
        _, completions, _, rewards = self.scorer(
            self.prompts, idx, ro.completion_ids, ro.completion_mask.sum(1), G, ro.environments
        )
        # (what the first round would find: said before it, as it would say it)
        if bool(rewards.isnan().all()):
            raise RewardError(no_reward_applies(rewards.numel(), self.rewards.names, self.failures()))
        rows = {c: [v[i] for i in idx] for c, v in self.prompts.columns.items()}
        right = (
            torch.tensor(verifier(completions, rows, k=G))
            if "answer" in rows
            else torch.zeros(len(completions))
        )
        return forecast_signal(rewards, right, G, time.perf_counter() - t0)


# sample_allocation: how a round's prompts are sampled (tinygrpo/algorithm/allocation.py says what each rule does
# and why; SAMPLE_ALLOCATIONS there names them). Each takes the generator and this process's prompts and returns
# their round; the rules that sample in passes (tinygrpo/rollout/passes.py) are handed the generator's `sample`.
ALLOCATION_RULES: dict[str, Callable[[BatchGenerator, list[int]], Round]] = {
    "fixed": lambda g, idx: g.draw(idx, g.sampling.temperature),
    "knapsack": lambda g, idx: g.draw(idx, g.sampling.temperature, g.allocate(idx)),
    "screen": lambda g, idx: screen(
        lambda i, s: g.sample(i, g.sampling.temperature, s),
        idx,
        g.cfg,
        g.stats.pass_rate,
        g.tokenizer.pad_token_id,
    ),
    "until_signal": lambda g, idx: until_signal(
        lambda i, s: g.sample(i, g.sampling.temperature, s), idx, g.cfg, g.tokenizer.pad_token_id
    ),
}
