"""The metrics of one training step (TRL's names where TRL has the metric), over all processes.

Sample statistics (reward, its spread, zero-variance groups, lengths, truncation) describe the step's first
generation round, whose prompts were drawn uniformly: dynamic sampling's refills are chosen for their signal and
would bias them. Counts (`num_completions`, `throughput/*`) include every round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rewards import reward_metrics
from tinygrpo.base.processes import Processes
from tinygrpo.data.task import Formats
from tinygrpo.data.verifier import format_counts, format_metrics
from tinygrpo.rollout.round import Round, ScoredBatch
from tinygrpo.update.policy_update import UpdateStats


@dataclass(frozen=True)
class StepTimes:
    """Wall-clock seconds of a step's phases."""

    collect: float  # generation and rewards, refills included
    ref_old: float  # layouts, reference and old log-probs
    update: float  # the update passes, schedule included


def step_metrics(
    scored: ScoredBatch,
    update: UpdateStats,
    times: StepTimes,
    procs: Processes,
    reward_names: list[str],
    *,
    learning_rate: float,
    num_completions: int,
) -> dict[str, float]:
    """metrics.jsonl's row for one step (everything but the trainer's own counters)."""
    first, trained = scored.first, scored.batch  # the first round's samples; the groups kept to train on
    G = first.batch.completion_ids.size(0) // first.batch.num_groups
    all_rewards = first.all_rewards
    # (a few thousand ints at most: plain Python is cheaper)
    lengths = first.gather(procs, first.lengths).tolist()
    truncated = first.gather(procs, (~first.is_eos).float())
    per_func = first.gather(procs, first.rewards_per_func)
    valid = all_rewards[~all_rewards.isnan()]
    with_signal = procs.sum(0 if trained.no_signal else int(trained.advantages.ne(0).sum()))
    m: dict[str, float] = dict(update.token_means)
    if update.skipped_updates:
        m["skipped_updates"] = update.skipped_updates
    if update.loss is not None:
        m["loss"] = update.loss
        m["grad_norm"] = update.grad_norm
    m.update(reward_metrics(per_func.numpy(), reward_names))
    m.update(
        {
            "reward": float(valid.mean()) if valid.numel() else 0.0,
            "reward_std": reward_std(all_rewards, first.all_sizes, G),
            "frac_reward_zero_std": float(first.zero_std.float().mean()),
            "completions/mean_length": sum(lengths) / len(lengths),
            "completions/min_length": float(min(lengths)),
            "completions/max_length": float(max(lengths)),
            "completions/clipped_ratio": float(truncated.mean()),
            "learning_rate": learning_rate,
            "num_completions": num_completions,
            "trained_completions": int(procs.sum(0 if trained.no_signal else trained.completion_ids.size(0))),
            # sampled completions that carried signal: a non-zero advantage in a group that was trained on
            "frac_completions_with_signal": with_signal / max(scored.num_sampled, 1),
        }
    )
    if first.tool_calls is not None:  # an environment: TRL's tools/* and the share of completions that call
        m.update(tool_metrics(first, procs))
    if first.kl is not None:  # use_kl_in_reward: the per-token k1 the rewards paid
        m["kl"] = float(first.gather(procs, first.kl).sum()) / max(sum(lengths), 1)
    if "accuracy" in reward_names:
        m["accuracy"] = m["rewards/accuracy/mean"]
    if scored.refill_rounds is not None:
        m["dynamic_sampling_rounds"] = scored.refill_rounds
    dt = times.collect + times.ref_old + times.update  # the step's
    m |= {"time/step": dt, "time/generate": scored.seconds_generate, "time/reward": scored.seconds_reward}
    m |= {"time/ref_old_logps": times.ref_old, "time/optimize": times.update}
    m["throughput/completions_per_s"], m["throughput/tokens_per_s"] = (
        scored.num_sampled / dt,
        sum(lengths) / dt,
    )
    return m


def tool_metrics(first: Round, procs: Processes) -> dict[str, float]:
    """TRL's tools/* of a round whose completions call an environment, and the share of completions that call."""
    calls, failures = (first.gather(procs, x).float() for x in (first.tool_calls, first.tool_failures))
    return {
        "tools/call_frequency": float(calls.mean()),
        "tools/failure_frequency": float(failures.sum() / calls.sum()) if bool(calls.sum() > 0) else 0.0,
        "tools/completions_with_calls": float((calls > 0).float().mean()),
    }


def reward_std(rewards: torch.Tensor, sizes: list[int] | None, unit: int) -> float:
    """The mean over groups of each group's reward std (NaN as 0, TRL's); groups of `sizes` units of `unit` rows."""
    r = rewards.nan_to_num(0)
    if sizes is None:
        return float(r.view(-1, unit).std(1).mean())
    return float(torch.stack([g.std() for g in r.split([k * unit for k in sizes])]).mean())


def verified_metrics(
    first: Round, right: list[bool], formats: Formats | None, procs: Processes
) -> dict[str, float]:
    """The first round's completions as the held-out verifier judges them (`right`, one per completion): the mean
    length of the right and of the wrong ones (Dr. GRPO's question: does the 1/|o| normaliser lengthen the wrong
    ones?) and, where the task defines formats, the share of each and the accuracy within each."""
    ok = torch.tensor(right, dtype=torch.bool)
    lengths = first.lengths.float().cpu()
    sums = torch.stack([ok.sum(), (lengths * ok).sum(), (~ok).sum(), (lengths * ~ok).sum()]).float()
    n_right, len_right, n_wrong, len_wrong = procs.gather(sums[None]).sum(0).tolist()
    m = {}
    if n_right:
        m["completions/mean_length_right"] = len_right / n_right
    if n_wrong:
        m["completions/mean_length_wrong"] = len_wrong / n_wrong
    if formats is not None:
        counts = procs.gather(format_counts(formats, first.completions, right)[None])
        m.update(format_metrics("completions/", formats, counts.sum(0)))
    return m


def answer_metrics(first: Round, columns: dict[str, list], verifier, procs: Processes) -> dict[str, float]:
    """The first round's completions judged right or wrong by the held-out verifier (verified_metrics); none for a
    prompt set without answers (nothing to verify against)."""
    if "answer" not in columns:
        return {}
    rows = {c: [v[i] for i in first.idx] for c, v in columns.items()}
    right = verifier(first.completions, rows, k=len(first.completions) // max(len(first.idx), 1))
    return verified_metrics(first, right, verifier.formats, procs)
