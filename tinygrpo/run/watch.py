"""Runs that cannot learn, said while they run.

GRPO learns only from groups whose rewards differ. Two ways a run can have none, and train on for minutes with
every step a no-op and exit 0:
- its completions are cut off: nearly every one hits max_completion_length before <eos>, so none can be a whole
  answer (a worked task run with max_completion_length 8 truncated 97-100 % of them);
- every group scores alike (all wrong, usually): the reference is too weak for the task, or G too small to find a
  right answer.

`LearningWatch` reads each step's metrics and, once a condition has held over the last `window` steps, gives one line
that names it and what usually helps; each condition is said once a run. The trainer prints the line, and logs it
(warnings.jsonl) for the report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tinygrpo.run.config import RunConfig

WINDOW = 5  # steps in a row
TRUNCATED = (
    0.9  # the share of completions cut off at max_completion_length (over the window) that is "nearly all"
)


@dataclass
class LearningWatch:
    max_completion_length: int
    num_generations: int
    answer_lengths: tuple[int, int] | None = None  # the shortest and longest right completion, in characters
    target: str = "answer"  # the column they are read from (target_lengths)
    window: int = WINDOW
    _recent: list[dict] = field(default_factory=list)  # the last `window` steps' metrics
    said: set[str] = field(default_factory=set)

    def observe(self, step: int, metrics: dict) -> list[str]:
        """The warnings this step's metrics complete (usually none)."""
        self._recent = [*self._recent, {"step": step, **metrics}][-self.window :]
        if len(self._recent) < self.window:
            return []
        recent = self._recent
        truncated = sum(m.get("completions/clipped_ratio", 0.0) for m in recent) / len(recent)
        held = {
            "truncated": truncated >= TRUNCATED,
            # Nothing trained on (first round, refills and explore rounds alike). A run whose every group is right
            # has nothing left to learn, and is not warned about.
            "no_signal": all(
                m.get("frac_completions_with_signal") == 0.0 and m.get("reward", 0.0) < 1.0 for m in recent
            ),
        }
        out = []
        for name, now in held.items():
            if now and name not in self.said:
                self.said.add(name)
                out.append(self._line(name, recent[0]["step"], step, truncated, metrics))
        return out

    def _line(self, name: str, first: int, last: int, truncated: float, m: dict) -> str:
        span = f"steps {first}-{last}"
        if name == "truncated":
            answers = ""
            if self.answer_lengths is not None:
                lo, hi = self.answer_lengths
                answers = f"; a right completion (the data's {self.target!r}) is {lo}-{hi} characters"
            return (
                f"warning: {span}: {truncated:.0%} of the completions hit "
                f"max_completion_length={self.max_completion_length} before <eos>{answers}: a cut-off completion "
                "is no whole answer, so its reward says little. Raise max_completion_length."
            )
        return (
            f"warning: {span}: no completion had signal (every group's {self.num_generations} completions scored "
            f"alike; mean reward {m.get('reward', 0.0):.2f}): GRPO learns nothing from such groups. What usually "
            "helps: a larger num_generations, explore_rounds, a higher temperature, a partial-credit reward, or a "
            "better reference or answer format."
        )


def forecast_before_training(
    generator, verifier, run: RunConfig, say: Callable[[str], None], warn: Callable[[str], None]
) -> dict:
    """The signal forecast (tinygrpo/algorithm/forecast.py) of `run.signal_forecast_prompts` training prompts, before
    the first step: its line said, and below signal_forecast_min a warning with what usually helps; its metrics
    ({} when off). A reward that fails raises the generator's RewardFailure."""
    if not run.signal_forecast_prompts:
        return {}
    f = generator.forecast(run.signal_forecast_prompts, verifier)
    say(f.line())
    if (warning := f.warning(run.signal_forecast_min)) is not None:
        warn(warning)
    return f.metrics


def target_lengths(
    columns: dict[str, list], task: str | None, dataset: str
) -> tuple[str, tuple[int, int] | None]:
    """The column a right completion reads like, the run's task's target (`answer`, or a worked task's own
    column), and its shortest and longest text: what the truncation warning compares max_completion_length with."""
    from tinygrpo.data.task import get_task, task_of_dataset

    named = get_task(task) if task else task_of_dataset(dataset)
    column = named.target if named is not None and named.target in columns else "answer"
    lengths = [len(str(a)) for a in columns.get(column) or []]
    return column, ((min(lengths), max(lengths)) if lengths else None)
