"""The one reader of the run's JSON-lines logs: a torn last line (a kill or a full disk mid-write) is dropped, and
repaired on resume; any other line that is not a JSON object is one error naming the file and the line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tinygrpo.run.config import ConfigError
from tinygrpo.run.logs import JsonlError, read_jsonl, read_jsonl_lines, truncate_after_step
from tinygrpo.run.report.curves import curve_panels, curves_figure, plot_metrics

LOGS = ("metrics.jsonl", "completions.jsonl", "prompt_stats.jsonl", "eval_failures.jsonl", "beliefs.jsonl")
ROWS = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.75, "note": "é"}]
TORN = '{"step": 3, "rew'  # what a kill leaves of a line: a prefix, without its newline


def _lines(rows: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def test_a_torn_last_line_is_dropped_and_the_lines_before_it_are_read(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(_lines(ROWS) + TORN)
    assert read_jsonl(p) == ROWS
    p.write_text(_lines(ROWS) + "\n\n")  # blank lines are no rows, and no error
    assert read_jsonl(p) == ROWS
    p.write_text(TORN)  # killed during its first write
    assert read_jsonl(p) == []
    assert read_jsonl(tmp_path / "absent.jsonl") == []
    cut = '{"step": 3, "note": "é'.encode()[:-1]  # cut inside a UTF-8 character
    p.write_bytes(_lines(ROWS).encode() + cut)
    assert read_jsonl(p) == ROWS
    assert [(n, line) for n, line, _ in read_jsonl_lines(p)] == [
        (1, json.dumps(ROWS[0], sort_keys=True).encode()),
        (2, json.dumps(ROWS[1], sort_keys=True).encode()),
    ]


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        # torn, then appended to: not the last line
        (_lines(ROWS[:1]) + TORN + "\n" + _lines(ROWS[1:]), 2, r"not JSON \(.* at column \d+\)"),
        # a last line with its newline was written whole: not torn
        (_lines(ROWS) + "garbage\n", 3, r"not JSON"),
        ("\n" + _lines(ROWS[:1]) + "[1, 2]\n" + _lines(ROWS[1:]), 3, "an array where a JSON object belongs"),
        (_lines(ROWS) + "null", 3, "null where a JSON object belongs"),  # parses: not a cut line
        ('"text"\n', 1, "a string where a JSON object belongs"),
        ("7\n", 1, "a number where a JSON object belongs"),
    ],
)
def test_a_bad_line_anywhere_else_is_one_error_naming_the_file_and_line(tmp_path, text, line, what):
    p = tmp_path / "metrics.jsonl"
    p.write_text(text)
    with pytest.raises(JsonlError, match=rf"^{re.escape(str(p))} line {line}: {what}") as e:
        read_jsonl(p)
    assert isinstance(e.value, ConfigError) and "\n" not in str(e.value)  # train_grpo.py: one `error:` line
    with pytest.raises(JsonlError, match=rf"^{re.escape(str(p))} line {line}: "):
        truncate_after_step(p, 10)
    assert p.read_text() == text  # left as it was


def test_bytes_that_are_not_utf8_are_an_error_naming_the_line(tmp_path):
    p = tmp_path / "completions.jsonl"
    p.write_bytes(b'{"step": 1}\n{"step": 2, "x": "\xff"}\n{"step": 3}\n')
    with pytest.raises(JsonlError, match=rf"^{re.escape(str(p))} line 2: not JSON \(not UTF-8 text\)$"):
        read_jsonl(p)


@pytest.mark.parametrize("name", LOGS)
def test_truncate_after_step_repairs_a_torn_last_line(tmp_path, name):
    """On resume: the lines after the checkpoint's step go, and so does a torn last line, so the resumed run's
    first line starts a line of its own (before: JSONDecodeError, `--resume_from_checkpoint latest` crashed)."""
    p = tmp_path / name
    whole = _lines([{"step": 0}, *ROWS])
    p.write_text(whole + TORN)
    truncate_after_step(p, 2)
    assert p.read_text() == whole  # the complete lines, byte for byte, and nothing else
    p.write_text(whole + TORN)
    truncate_after_step(p, 1)
    assert p.read_text() == _lines([{"step": 0}, ROWS[0]])
    p.write_text(TORN)
    truncate_after_step(p, 1)
    assert p.read_bytes() == b""
    assert not (tmp_path / f"{name}.tmp").exists()
    truncate_after_step(tmp_path / "absent.jsonl", 1)  # a log the run never wrote: nothing to do
    assert not (tmp_path / "absent.jsonl").exists()


def test_truncate_after_step_keeps_rows_without_a_step_and_rejects_a_step_that_is_no_number(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(_lines([{"step": 1}, {"note": "no step"}, {"step": 2}]))
    truncate_after_step(p, 1)
    assert read_jsonl(p) == [{"step": 1}, {"note": "no step"}]
    p.write_text(_lines([{"step": 1}, {"step": "2"}]))
    with pytest.raises(JsonlError, match=rf'^{re.escape(str(p))} line 2: \'step\' is "2", not a number$'):
        truncate_after_step(p, 1)


def _metrics(beta: bool) -> list[dict]:
    rows = [
        {
            "step": 0,
            "eval/accuracy": 0.25,
            "eval/accuracy/carry": 0.5,
            "num_completions": 0,
            "time/elapsed": 0.0,
        }
    ]
    for s in (1, 2):
        row = {
            "step": s,
            "reward": 0.1 * s,
            "entropy": 0.3,
            "frac_reward_zero_std": 0.5,
            "num_completions": 8 * s,
        }
        row |= {"time/elapsed": 0.5 * s, "completions/mean_length": 2.5, "completions/max_length": 3.0}
        rows.append(row | ({"kl": 0.01 * s} if beta else {}))
    rows.append({"step": 2, "eval/accuracy": 0.5, "eval/accuracy/carry": 0.75, "num_completions": 16})
    return rows


@pytest.mark.slow
def test_the_curves_figure_is_the_union_of_plots_png_and_the_reports_panels(tmp_path):
    """One builder: plots.png's panels (reward, accuracy by kind, KL or entropy, signal, prompts, kinds first and
    last) and the report's (accuracy against seconds and completions, lengths), nine in a 3x3 grid."""
    for beta, third in ((False, "entropy"), (True, "kl")):
        rows = _metrics(beta)
        fig = curves_figure(rows)
        titles = [ax.get_title() for ax in fig.axes]
        assert titles == [panel.title for panel in curve_panels(rows)] and len(titles) == 9
        assert {"held-out greedy accuracy against seconds", "completion length (tokens, EOS included)"} < set(
            titles
        )
        p = tmp_path / "metrics.jsonl"
        p.write_text(_lines(rows))
        keys = plot_metrics(p, tmp_path / "plots.png")
        assert keys[2] == third and keys == [panel.key for panel in curve_panels(rows)]
        assert (tmp_path / "plots.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a panel with nothing logged says so instead of showing empty axes
    texts = [t.get_text() for ax in curves_figure([{"step": 0}]).axes for t in ax.texts]
    assert texts == ["not logged"] * 9


def test_plot_metrics_reads_past_a_torn_last_line(tmp_path: Path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(_lines(_metrics(False)) + TORN)
    assert plot_metrics(p, tmp_path / "plots.png")[0] == "reward"


def test_a_run_with_formats_gets_the_format_panels_below_the_nine():
    rows = _metrics(False)
    rows.append(
        {"step": 2, "eval/format/direct": 0.9, "eval/format/worked": 0.1, "eval/format_accuracy/direct": 0.5}
    )
    rows.append({"step": 2, "completions/format/direct": 0.8, "completions/format/worked": 0.2})
    panels = curve_panels(rows)
    assert [p.key for p in panels[9:]] == ["formats", "format_accuracy"]
    assert {y for y, _ in panels[9].ys} == {
        f"{p}format/{f}" for p in ("eval/", "completions/") for f in ("direct", "worked")
    }
    fig = curves_figure(rows)
    assert [ax.get_title() for ax in fig.axes] == [p.title for p in panels]  # 11 drawn, the 12th cell removed
    lines = {line.get_label() for line in fig.axes[9].get_lines()}
    assert lines == {"direct (greedy)", "worked (greedy)", "direct (sampled)", "worked (sampled)"}
