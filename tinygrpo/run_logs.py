"""A run's JSONL logs, written by the main process: metrics.jsonl, completions.jsonl, and what the report
(tinygrpo/report.py) shows beside the metrics, written at every evaluation (prompt_stats.jsonl,
eval_failures.jsonl, beliefs.jsonl). Each file is listed in launch.RUN_FILES and truncated on resume."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .generation import ScoredBatch
from .metrics_io import JsonlWriter, truncate_after_step

DETAIL_FILES = ("prompt_stats", "eval_failures", "beliefs")  # <name>.jsonl, written at every evaluation
MAX_BELIEF_PROMPTS, MAX_BELIEF_ANSWERS = 64, 32  # beliefs are logged for problem sets this small


class RunLogs:
    def __init__(self, out: Path, enabled: bool) -> None:
        self.out = out
        self.names = ("metrics", "completions", *DETAIL_FILES)
        self.files = {name: JsonlWriter(out / f"{name}.jsonl", enabled=enabled) for name in self.names}

    def truncate_after(self, step: int) -> None:
        """On resume: drop what was logged after the checkpoint's step (those steps are about to be redone)."""
        for name in self.names:
            truncate_after_step(self.out / f"{name}.jsonl", step)

    def metrics(self, step: int, metrics: dict) -> None:
        self.files["metrics"].write({"step": step, **metrics})

    def completions(
        self, step: int, scored: ScoredBatch, reward_names: list[str], count: int, answers: list | None
    ) -> None:
        """The first `count` samples of the step's first round: prompt, completion, each reward function's value,
        the combined reward, the advantage and (when the data has one) the gold answer."""
        first = scored.first
        G = first.completion_ids.size(0) // len(first.idx)
        for i in range(min(count, len(first.completions))):
            values = first.rewards_per_func[i].tolist()
            rewards = {n: (None if math.isnan(v) else v) for n, v in zip(reward_names, values, strict=True)}
            reward = float(first.rewards[i])
            row = {"step": step, "prompt": first.prompts[i], "completion": first.completions[i]}
            row |= {"rewards": rewards, "reward": None if math.isnan(reward) else reward}
            row["advantage"] = float(first.advantages[i])
            if answers is not None:
                row["answer"] = answers[first.idx[i // G]]
            self.files["completions"].write(row)

    def evaluation(
        self,
        step: int,
        pass_rate: torch.Tensor,
        rows: dict,
        completions: list[str],
        right: list[bool],
        beliefs: Callable[[list[str]], torch.Tensor],
    ) -> None:
        """At an evaluation: every training prompt's pass-rate estimate, the held-out problems answered wrong (rows:
        the held-out split's columns; completions: the greedy ones; right: the verifier's judgement of each), and, on a small problem set, the policy's belief
        in each answer (`beliefs(answers)` -> (P, C) probabilities): the report's per-prompt pictures."""
        rates = [None if r != r else round(r, 3) for r in pass_rate.tolist()]
        self.files["prompt_stats"].write({"step": step, "pass_rate": rates})
        wrong = [
            [p, str(a), c]
            for p, a, c, ok in zip(rows["prompt"], rows["answer"], completions, right, strict=True)
            if not ok
        ]
        self.files["eval_failures"].write({"step": step, "total": len(completions), "failures": wrong})
        answers = sorted({str(a) for a in rows["answer"]}, key=lambda a: (len(a), a))
        if len(completions) <= MAX_BELIEF_PROMPTS and len(answers) <= MAX_BELIEF_ANSWERS:
            probs = beliefs(answers)
            row = {"step": step, "questions": rows["prompt"], "answers": answers}
            row["gold"] = [str(a) for a in rows["answer"]]
            self.files["beliefs"].write({**row, "probs": [[round(x, 4) for x in r] for r in probs.tolist()]})


class ProgressBar:
    """The run's progress bar (main process): the step's sampled reward and the latest held-out accuracy."""

    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.bar = tqdm(total=total, initial=initial, disable=not enabled, desc="grpo", dynamic_ncols=True)
        self.held_out: float | None = None

    def update(self, metrics: dict) -> None:
        self.held_out = metrics.get("eval/accuracy", self.held_out)
        post = {"reward": f"{metrics['reward']:.3f}"}
        if self.held_out is not None:
            post["held_out"] = f"{self.held_out:.3f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
