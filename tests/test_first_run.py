"""studies/first_run.py: README command 1's example output is what the command printed, as a terminal shows it."""

from __future__ import annotations

from studies import first_run


def test_a_progress_bar_keeps_its_last_state_and_blank_lines_go():
    raw = "first\r\n\ngrpo:   0%| 0/3\rgrpo:  33%| 1/3\rgrpo: 100%| 3/3  \n\nlast\n"
    assert first_run.printed_lines(raw) == ["first", "grpo: 100%| 3/3", "last"]


def test_the_sft_lines_between_the_first_and_the_last_are_shortened():
    lines = [
        "no reference",
        *(f"sft step {s:5d}  loss 0.1" for s in (100, 200, 300)),
        "reference saved",
        "end",
    ]
    assert first_run.shortened(lines) == [
        "no reference",
        "sft step   100  loss 0.1",
        "...",
        "sft step   300  loss 0.1",
        "reference saved",
        "end",
    ]
    two = ["sft step 100  loss 1", "sft step 200  loss 0.5", "x"]
    assert first_run.shortened(two) == two  # nothing between the first and the last


def test_the_readme_block_names_the_machine_and_holds_the_output():
    results = {
        "measurement": {"machine": {"cpu": "Some CPU", "cores": "2", "kernels": "AVX2"}},
        "seconds": 150.0,
        "output": ["sft step 100  loss 1", "sft step 200  loss 0.5", "sft step 300  loss 0.2", "done 61.0%"],
    }
    text = first_run.output(results)
    assert "2.5 minutes" in text and "one machine: Some CPU, 2 cores, AVX2 kernels, one thread" in text
    assert text.endswith("```text\nsft step 100  loss 1\n...\nsft step 300  loss 0.2\ndone 61.0%\n```")


def test_a_bar_relayed_line_by_line_keeps_its_last_state():
    lines = ["start", "grpo:   0%| 0/3", "grpo:  33%| 1/3, reward=0.5", "grpo: 100%| 3/3, reward=1.0", "done"]
    assert first_run.shortened(lines) == ["start", "grpo: 100%| 3/3, reward=1.0", "done"]
    two_bars = ["a:  50%| 1/2", "b:  50%| 1/2", "b: 100%| 2/2"]
    assert first_run.shortened(two_bars) == ["a:  50%| 1/2", "b: 100%| 2/2"]
