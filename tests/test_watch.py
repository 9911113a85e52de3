"""tinygrpo/run/watch.py: a run that cannot learn says so while it runs, once per cause, and the report shows it."""

from __future__ import annotations

import pytest
from _runs import run_inproc

from tinygrpo.run.logs import read_jsonl
from tinygrpo.run.watch import LearningWatch


def steps(n: int, **metrics) -> list[dict]:
    base = {"completions/clipped_ratio": 0.1, "frac_completions_with_signal": 0.2, "reward": 0.5}
    return [{**base, **metrics} for _ in range(n)]


def observe(watch: LearningWatch, rows: list[dict], start: int = 1) -> list[tuple[int, str]]:
    return [(start + i, line) for i, m in enumerate(rows) for line in watch.observe(start + i, m)]


@pytest.mark.parametrize(
    "rows, said",
    [
        (steps(20), []),  # a run that learns
        (steps(4, **{"completions/clipped_ratio": 1.0}) + steps(10), []),  # shorter than the window
        (steps(5, **{"completions/clipped_ratio": 0.95}), [(5, "97%|95%")]),
        # the window's mean: 0.85 and 1.0 alternating is 0.91 over 5 steps
        (steps(1, **{"completions/clipped_ratio": 0.85}) * 5, []),
        ([*steps(1, **{"completions/clipped_ratio": 1.0}), *steps(1, **{"completions/clipped_ratio": 0.85})] * 3,
         [(5, "94%")]),
        (steps(5, frac_completions_with_signal=0.0, reward=0.0), [(5, "no completion had signal")]),
        (steps(5, frac_completions_with_signal=0.0, reward=1.0), []),  # everything right: nothing left to learn
        (steps(4, frac_completions_with_signal=0.0) + steps(1) + steps(4, frac_completions_with_signal=0.0), []),
    ],
)  # fmt: skip
def test_a_condition_over_the_window_is_said_once(rows, said):
    watch = LearningWatch(max_completion_length=8, num_generations=8, answer_lengths=(1, 38))
    got = observe(watch, rows)
    assert [step for step, _ in got] == [step for step, _ in said]
    for (_, line), (_, words) in zip(got, said, strict=True):
        assert line.startswith("warning: steps 1-5: ") and any(w in line for w in words.split("|")), line
    if said:  # once a run: the same steps again say nothing
        assert observe(watch, rows, start=len(rows) + 1) == []


def test_the_truncation_line_names_the_length_and_the_answers():
    watch = LearningWatch(
        max_completion_length=8, num_generations=8, answer_lengths=(12, 38), target="worked"
    )
    (line,) = [x for m in steps(5, **{"completions/clipped_ratio": 0.99}) for x in watch.observe(1, m)]
    assert "max_completion_length=8" in line and "Raise max_completion_length" in line
    assert "a right completion (the data's 'worked') is 12-38 characters" in line


@pytest.mark.parametrize(
    "task, column", [("multiplication_scratchpad", "worked"), ("multiplication", "answer"), (None, "answer")]
)
def test_the_truncation_line_reads_the_lengths_of_the_tasks_own_completions(task, column):
    """A worked task's right completions are its worked column, not its answers (the scratchpad's are ~30
    characters, its answers 3-5): the line compares max_completion_length with those."""

    from tinygrpo.data.problems import load_split
    from tinygrpo.run.watch import target_lengths

    rows = load_split("multiplication", "validation").to_dict()
    got, (lo, hi) = target_lengths(rows, task, "multiplication")
    assert got == column and (lo, hi) == (min(map(len, rows[column])), max(map(len, rows[column])))


@pytest.mark.slow
def test_runs_that_cannot_learn_say_why_on_stderr_in_their_logs_and_report(seed_reference, tmp_path, capfd):
    # One token per completion: every answer that is not <eos> at once is cut off (the seed bank's answers take two
    # or three). And a constant reward: no group ever has signal.
    (tmp_path / "const.py").write_text("def const(completions, **kw):\n    return [0.0] * len(completions)\n")
    for name, extra, words in (
        ("short", ["--max_completion_length", "1"], "max_completion_length=1"),
        ("flat", ["--reward_funcs", f"{tmp_path / 'const.py'}:const"], "no completion had signal"),
    ):
        out = tmp_path / name
        assert run_inproc(seed_reference, out, "--max_steps", "7", *extra) == 0
        err = capfd.readouterr().err
        lines = [x for x in err.splitlines() if x.startswith("warning:")]
        assert any(words in x for x in lines) and len(lines) == len(set(lines)), err  # (each said once)
        logged = read_jsonl(out / "warnings.jsonl")
        # (and before step 1 the signal forecast saw it coming: no group of its samples had signal either)
        assert [r["warning"] for r in logged] == lines and {r["step"] for r in logged} == {0, 5}
        assert [r["step"] for r in logged if "forecast" in r["warning"]] == [0]
        assert words in (out / "report.html").read_text()


@pytest.mark.parametrize("share, warned", [(0.9, True), (0.8999, False), (1.0, True)])
def test_the_truncation_warning_starts_at_ninety_percent_exactly(share, warned):
    watch = LearningWatch(max_completion_length=8, num_generations=8)
    said = observe(watch, steps(5, **{"completions/clipped_ratio": share}))
    assert bool(said) == warned, said
