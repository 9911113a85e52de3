"""report.html: built from a run directory's files alone, for finished, interrupted and older runs; rendered in a
real headless browser where one is installed (.ci/run installs Debian's chromium)."""

from __future__ import annotations

import base64
import errno
import html
import json
import os
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
from _runs import run_inproc

from tinygrpo.run.logs import read_jsonl
from tinygrpo.run.report import REPORT_FILE, build_report, main
from tinygrpo.run.report.curves import plot_metrics
from tinygrpo.run.report.html import NO_FIGURE

SECTIONS = ("run", "curves", "groups", "tokens", "prompts", "beliefs")
NOT_RECORDED = "not recorded in this run"  # the run section's row naming the logs a run did not write
# The training prompts by their latest group, as the trainer logs them (PromptStats.counts), with the report's words.
PROMPT_GROUP_WORDS = (
    ("prompts/unsolved", "unsolved"),
    ("prompts/partly_solved", "partly solved"),
    ("prompts/solved", "solved"),
    ("prompts/unseen", "unseen"),
)
SIGNAL_KEYS = ("frac_completions_with_signal", "frac_reward_zero_std")
TOKEN_KEYS = ("tokens", "token_advantage", "token_p_old", "token_p_new", "token_ratio", "token_entropy")


@pytest.fixture(scope="module")
def run_dir(seed_reference, tmp_path_factory) -> Path:
    """A finished 6-step run on the seed bank, evaluated on its 36 questions every 3 steps."""
    out = tmp_path_factory.mktemp("report") / "run"
    argv = "--max_steps 6 --eval_steps 3 --logging_steps 2 --save_steps 0 --prompt_sampler uniform".split()
    assert run_inproc(seed_reference, out, *argv, "--make_plots", "true") == 0
    return out


def _signal_group(run: Path) -> list[dict]:
    """The first group with signal (advantages not all equal) of the last logged step: the Tokens section draws it."""
    rows = read_jsonl(run / "completions.jsonl")
    last = [r for r in rows if r["step"] == rows[-1]["step"]]
    groups = [[r for r in last if r["prompt"] == p] for p in dict.fromkeys(r["prompt"] for r in last)]
    signal = [g for g in groups if len({r["advantage"] for r in g}) > 1]
    assert signal, "the run's last logged step has no group with signal: nothing to draw"
    return signal[0]


def _token_cell(row: dict, t: int) -> str:
    """Token t of a logged completion as its hover title and text, as the report must draw it."""
    a, p_old, p_new, ratio, entropy = (row[k][t] for k in TOKEN_KEYS[1:])
    title = (
        f"p_old {p_old:.4g}, p_new {p_new:.4g}, ratio {ratio:.4g}, entropy {entropy:.4g}, advantage {a:+.4g}"
    )
    return f'title="{title}">{html.escape(row["tokens"][t])}</span>'


def _numbers(run: Path) -> dict:
    """What the report must show, read from the run's files independently of tinygrpo.run.report."""
    metrics = read_jsonl(run / "metrics.jsonl")
    evals = [r for r in metrics if "eval/accuracy" in r]
    fails = read_jsonl(run / "eval_failures.jsonl")[-1]
    steps = [r for r in metrics if "frac_completions_with_signal" in r]
    counted = [r for r in metrics if "prompts/solved" in r][-1]
    groups = ", ".join(f"{counted[k]} {w}" for k, w in PROMPT_GROUP_WORDS)
    signal, zero_std = (statistics.mean(r[k] for r in steps) for k in SIGNAL_KEYS)
    return {
        "signal": f"frac_completions_with_signal), mean of the logged steps</th><td>{signal:.1%}",
        "zero_std": f"frac_reward_zero_std), mean of the logged steps</th><td>{zero_std:.1%}",
        "accuracy": f"{evals[0]['eval/accuracy']:.1%} -&gt; {evals[-1]['eval/accuracy']:.1%}",
        "completions": f"{metrics[-1]['num_completions']:,}",
        "failures": f"{len(fails['failures'])} wrong of {fails['total']}",
        "completion": html.escape(read_jsonl(run / "completions.jsonl")[-1]["completion"]),
        "token": _token_cell(_signal_group(run)[0], 0),
        "groups": f"(the curves' panel of that name), at step {counted['step']}: {groups}.",
    }


@pytest.mark.slow
def test_a_run_without_plots_writes_its_report_without_figures_and_the_report_command_draws_them(
    seed_reference, tmp_path
):
    out = tmp_path / "run"
    argv = "--max_steps 2 --eval_steps 1 --save_steps 0 --make_plots false".split()
    assert run_inproc(seed_reference, out, *argv) == 0
    text = (out / REPORT_FILE).read_text()
    assert "base64" not in text and not (out / "plots.png").exists()
    assert (
        text.count(NO_FIGURE) == 3
    )  # curves, pass rates, beliefs: each says where it would be, and how to draw it
    assert main([str(out)]) == 0  # python -m tinygrpo.run.report RUN_DIR
    text = (out / REPORT_FILE).read_text()
    assert NO_FIGURE not in text and text.count('src="data:image/png;base64,') == 3


@pytest.mark.slow
def test_the_trainer_writes_a_self_contained_report_with_the_run_numbers(run_dir):
    text = (run_dir / REPORT_FILE).read_text()
    for s in SECTIONS:
        assert f'<section id="{s}">' in text
    for name, value in _numbers(run_dir).items():
        assert value in text, name
    assert NOT_RECORDED not in text  # this version's run writes every file the report reads
    # self-contained: no script, no stylesheet or image fetched from anywhere
    assert "<script" not in text and "<link" not in text and 'src="http' not in text
    assert text.count('src="data:image/png;base64,') == 3  # curves, pass rates, beliefs
    assert len(text) < 2_000_000
    config = json.loads((run_dir / "config.json").read_text())
    assert f"--max_steps {config['max_steps']}" in text  # the command that reproduces the run


@pytest.mark.slow
def test_a_report_of_an_interrupted_run_and_of_an_older_run_says_what_is_missing(run_dir, tmp_path):
    # interrupted: metrics cut after step 2, the last line cut in the middle; older: only what old versions wrote
    cut = tmp_path / "cut"
    cut.mkdir()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    keep = [line for line in lines if json.loads(line)["step"] <= 2]
    (cut / "metrics.jsonl").write_text("\n".join(keep) + "\n" + lines[len(keep)][:20])
    shutil.copy(run_dir / "config.json", cut / "config.json")
    assert main([str(cut)]) == 0
    text = (cut / REPORT_FILE).read_text()
    assert "2 of 6 (stopped early, or still running)" in text
    said = _run_row(text, NOT_RECORDED)
    for log in ("completions.jsonl (", "prompt_stats.jsonl", "eval_failures.jsonl"):
        assert log in said
    for s in ("groups", "tokens", "beliefs"):  # nothing to show: no section, no link
        assert f'<section id="{s}">' not in text and f'href="#{s}"' not in text
    prompts = _section(text, "prompts")  # accuracy by problem kind alone: metrics.jsonl has it
    assert prompts.count("<h3>") == 1 and "<h3>Held-out accuracy by problem kind</h3>" in prompts
    old = tmp_path / "old"
    old.mkdir()
    for name in ("metrics.jsonl", "completions.jsonl"):
        rows = read_jsonl(run_dir / name)
        for r in rows:
            for k in ("time/elapsed", "advantage", "reward", "answer", "frac_completions_with_signal"):
                r.pop(k, None)
            for k in TOKEN_KEYS:
                r.pop(k, None)
        (old / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = build_report(old)
    said = _run_row(text, NOT_RECORDED)
    assert '<section id="groups">' in text and "prompt_stats.jsonl, written by runs" in said
    assert "per-token probabilities in completions.jsonl" in said
    assert '<section id="tokens">' not in text and 'href="#tokens"' not in text and "class=tok" not in text


def _background(cell_start: str) -> tuple[int, int, int]:
    r, g, b = re.search(r"background:rgb\((\d+),(\d+),(\d+)\)", cell_start).groups()
    return int(r), int(g), int(b)


def test_the_tokens_section_draws_a_group_with_signal_token_by_token(run_dir):
    """Every token of the last step's group with signal is a cell with its numbers on hover and in the table,
    coloured blue for a positive advantage and red for a negative one; the completion's reward is marked."""
    tokens = _section((run_dir / REPORT_FILE).read_text(), "tokens")
    group = _signal_group(run_dir)
    signs = {r["advantage"] > 0 for r in group}
    assert signs == {True, False}  # both colours are exercised
    for row in group:
        assert len(row["tokens"]) >= 1
        for t in range(len(row["tokens"])):
            cell = _token_cell(row, t)
            assert cell in tokens
            start = tokens[: tokens.index(cell)].rsplit("<span class=tok", 1)[1]
            r, g, b = _background(start)
            assert (b > r) if row["advantage"] > 0 else (r > b), (row["advantage"], start)
            p_new = row["token_p_new"][t]
            assert (
                f"<td><code>{html.escape(row['tokens'][t])}</code></td>" in tokens
                and f"<td>{p_new:.4g}</td>" in tokens
            )
    assert f"<code>{html.escape(group[0]['prompt'])}</code>" in tokens
    assert "reward 1</td>" in tokens and "reward 0</td>" in tokens
    last = max(r["step"] for r in read_jsonl(run_dir / "completions.jsonl"))
    assert (
        f"<details open><summary>step {last}:" in tokens
    )  # the last logged step is open, earlier ones closed


def test_report_of_a_directory_that_is_no_run_is_an_error_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == f"error: {tmp_path} is not a run directory (no metrics.jsonl)"


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err.strip()


def test_report_of_garbage_metrics_is_an_error_line_naming_the_file_and_line(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text("this is not\nJSON lines\n")  # before: exit 0 and an empty report
    assert main([str(tmp_path)]) == 1
    assert re.fullmatch(
        rf"error: {re.escape(str(tmp_path / 'metrics.jsonl'))} line 1: not JSON \(.*\)",
        _one_error_line(capsys),
    )
    assert not (tmp_path / REPORT_FILE).exists()


@pytest.mark.parametrize(
    ("name", "line", "message"),
    [
        ("metrics.jsonl", '[0, {"reward": 1}]', "an array where a JSON object belongs"),
        ("metrics.jsonl", '{"reward": 0.5}', "no 'step' in the row"),
        ("metrics.jsonl", '{"step": 1, "reward": "high"}', "'reward' should be a number, not \"high\""),
        ("metrics.jsonl", '{"step": "1"}', "'step' should be an integer, not \"1\""),
        (
            "metrics.jsonl",
            '{"step": 1, "eval/accuracy/carry": [1]}',
            "'eval/accuracy/carry' should be a number or null",
        ),
        (
            "completions.jsonl",
            '{"step": 1, "prompt": "1+1=", "completion": 2}',
            "'completion' should be a string",
        ),
        (
            "eval_failures.jsonl",
            '{"step": 1, "total": 2, "failures": [["1+1=", "2"]]}',
            "'failures' should be a list",
        ),
        (
            "beliefs.jsonl",
            '{"step": 1, "questions": [], "answers": [], "gold": [], "probs": [[1], []]}',
            "'probs'",
        ),
    ],
)
def test_report_of_logs_of_the_wrong_shape_is_an_error_line(tmp_path, capsys, name, line, message):
    """Valid JSON that is not what the report reads: one error line naming the file, line and key, never a
    traceback (before: a KeyError or TypeError from inside a section)."""
    good = {"step": 0, "eval/accuracy": 0.5, "prompt": "1+1=", "completion": "2", "pass_rate": [], "total": 0}
    good |= {"failures": [], "questions": ["1+1="], "answers": ["2"], "gold": ["2"], "probs": [[0.5]]}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(good) + "\n")
    (tmp_path / name).write_text(json.dumps(good) + "\n" + line + "\n")
    assert main([str(tmp_path)]) == 1
    err = _one_error_line(capsys)
    assert err.startswith(f"error: {tmp_path / name} line 2: ") and message in err, err


def test_report_into_a_read_only_run_directory_is_an_error_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "eval/accuracy": 0.5}\n')
    run.chmod(0o555)
    try:
        if os.access(run, os.W_OK):
            pytest.skip("the run directory stays writable after chmod (running as root)")
        assert main([str(run)]) == 1
        err = _one_error_line(capsys)
    finally:
        run.chmod(0o755)
    assert err in (
        f"error: cannot write {run / REPORT_FILE}: {os.strerror(n)}" for n in (errno.EACCES, errno.EROFS)
    )


def test_report_that_cannot_be_written_is_an_error_line_naming_the_file_and_the_reason(tmp_path, capsys):
    """The same path as a read-only directory, where root can write anyway: the temporary file cannot be created."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "eval/accuracy": 0.5}\n')
    (tmp_path / (REPORT_FILE + ".tmp")).mkdir()
    assert main([str(tmp_path)]) == 1
    assert (
        _one_error_line(capsys)
        == f"error: cannot write {tmp_path / REPORT_FILE}: {os.strerror(errno.EISDIR)}"
    )
    assert not (tmp_path / REPORT_FILE).exists()


@pytest.mark.slow
def test_the_report_inlines_the_figure_of_plots_png(run_dir, tmp_path):
    """One builder (report.curves.curves_figure): plots.png and the report's curves are the same picture, pixel for pixel."""
    plot_metrics(run_dir / "metrics.jsonl", tmp_path / "plots.png")
    curves = build_report(run_dir).split('<section id="curves">')[1].split("</section>")[0]
    data = re.search(r'src="data:image/png;base64,([^"]+)"', curves)[1]
    assert base64.b64decode(data) == (tmp_path / "plots.png").read_bytes()


def _browser() -> str | None:
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.slow
@pytest.mark.skipif(
    _browser() is None, reason="no headless Chromium installed (.ci/run installs Debian's chromium)"
)
def test_the_report_renders_in_a_headless_browser(run_dir, tmp_path):
    browser = _browser()
    url = (run_dir / REPORT_FILE).resolve().as_uri()
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'p'}",
    ]
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    for s in SECTIONS:
        assert f'<section id="{s}">' in dom
    for name, value in _numbers(run_dir).items():
        assert value in dom, name
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser, *flags, "--window-size=1300,2400", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a page with figures, not a blank one


# Text from the dataset and the policy, as a hostile dataset may hold it: markup, an entity, quotes.
HOSTILE_PROMPT = '<script>alert("p")</script> 1&2 "q"='
HOSTILE_GOLD = '<b>3</b>&"'
HOSTILE_COMPLETION = '<img src=x onerror="c()">&amp;'
# The completion's tokens (a cell's text follows the ">" of its tag: a token "&amp;" would read as raw ">&amp;").
HOSTILE_TOKENS = ["<img src=x ", 'onerror="c()">&', "amp;"]


def _section(text: str, name: str) -> str:
    return text.split(f'<section id="{name}">')[1].split("</section>")[0]


def test_prompts_answers_and_completions_are_escaped_in_the_groups_and_failures_tables(tmp_path):
    """Hand-written run files whose prompts, gold answers and completions hold markup, `&` and `"`: each table
    cell shows the text escaped (html.escape, quotes included), and no raw form of it is anywhere in the page."""
    rows = {
        "metrics.jsonl": [{"step": 0, "eval/accuracy": 0.5}, {"step": 1, "eval/accuracy": 0.5}],
        "completions.jsonl": [
            {"step": 1, "prompt": HOSTILE_PROMPT, "completion": HOSTILE_COMPLETION, "answer": HOSTILE_GOLD}
            | {"reward": r, "advantage": a, "tokens": HOSTILE_TOKENS, "token_advantage": [a] * 3}
            | dict.fromkeys(("token_p_old", "token_p_new", "token_ratio", "token_entropy"), [0.5] * 3)
            for r, a in ((0.0, -0.5), (1.0, 0.5))
        ],
        "eval_failures.jsonl": [
            {"step": 1, "total": 2, "failures": [[HOSTILE_PROMPT, HOSTILE_GOLD, HOSTILE_COMPLETION]]}
        ],
    }
    for name, lines in rows.items():
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in lines))
    text = build_report(tmp_path)
    groups, prompts, tokens = (_section(text, s) for s in ("groups", "prompts", "tokens"))
    escaped = [html.escape(s) for s in (HOSTILE_PROMPT, HOSTILE_GOLD, HOSTILE_COMPLETION)]
    p, g, c = escaped
    assert f"<th><code>{p}</code></th><td>{g}</td>" in groups  # the group's row: its prompt and gold answer
    assert groups.count(f"<code>{c}</code>") == 2  # each completion's cell
    assert f"<tr><td><code>{p}</code></td><td>{g}</td><td><code>{c}</code></td></tr>" in prompts
    assert f"<p>Prompt <code>{p}</code> (gold {g})</p>" in tokens  # the group drawn token by token
    for t in HOSTILE_TOKENS:
        assert tokens.count(f">{html.escape(t)}</span>") == 2  # each completion's token cell
        assert tokens.count(f"<td><code>{html.escape(t)}</code></td>") == 2  # and its row of numbers
    # no raw piece of them anywhere (the page's own <img> figures aside: their src is a data URI)
    pieces = ("<script>alert", '"p"', "1&2", "<b>3</b>", '&"', "<img src=x", 'onerror="', ">&amp;")
    for raw in (HOSTILE_PROMPT, HOSTILE_GOLD, HOSTILE_COMPLETION, *pieces):
        assert raw not in text, raw


@pytest.mark.parametrize("wrong", [0, 5, 20, 21, 327])
def test_the_failures_table_is_bounded_and_counts_the_rest(wrong):
    from tinygrpo.run.report.prompts import FAILURES_SHOWN, section_prompts

    fails = [[f"{i}+1=", str(i + 1), f"{i}<eos>"] for i in range(wrong)]
    text = section_prompts([], [{"step": 10, "total": 500, "failures": fails}], [])
    assert text.count("<tr><td><code>") == min(wrong, FAILURES_SHOWN)
    assert f"{wrong} wrong of 500" in text
    rest = f"The first {FAILURES_SHOWN} of {wrong}; the other {wrong - FAILURES_SHOWN} are in eval_failures.jsonl"
    assert (rest in text) == (wrong > FAILURES_SHOWN)


def test_a_run_without_warnings_says_so():
    from tinygrpo.run.report.run import section_run

    assert "none: the run warned about nothing" in section_run(Path("r"), {}, [], [])
    said = section_run(Path("r"), {}, [], [{"step": 3, "warning": "no signal"}])
    assert "no signal" in said and "warned about nothing" not in said


def _run_row(text: str, header: str) -> str:
    """The value of the run section's summary row `header` (AssertionError when there is no such row)."""
    found = re.search(rf"<tr><th>{re.escape(header)}</th><td>(.*?)</td></tr>", _section(text, "run"))
    assert found, f"no row {header!r} in the run section"
    return found[1]


def _write_logs(run: Path, logs: dict[str, list[dict]]) -> None:
    for name, rows in logs.items():
        (run / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def _pass_rate_rows(n: int, drawn: list[int]) -> list[dict]:
    """prompt_stats.jsonl of n prompts at evaluations 0, 10, 20, ...: the first drawn[i] prompts have an estimate
    at the i-th (prompt j's is j / n), the others none (not drawn yet)."""
    return [
        {"step": 10 * i, "pass_rate": [j / n if j < k else None for j in range(n)]}
        for i, k in enumerate(drawn)
    ]


def test_the_pass_rate_heatmap_counts_prompts_not_bins_and_says_why_it_is_grey():
    """1,000 prompts in at most MAX_HEATMAP_ROWS rows: the prompt axis runs over the prompts (before: its ticks were
    bin numbers, 0 to 299, under a label counting 1,000 prompts), and the text says what grey is, with the count."""
    from tinygrpo.run.report.logs import MAX_HEATMAP_ROWS
    from tinygrpo.run.report.prompts import pass_rate_figure, pass_rates, section_prompts

    stats = _pass_rate_rows(1000, [0, 400, 700])
    ax = pass_rate_figure(pass_rates(stats), [0, 10, 20]).axes[0]
    assert sorted(ax.get_ylim()) == [0, 1000] and "1,000 training prompts" in ax.get_ylabel()
    ticks = [t for t in ax.get_yticks() if 0 <= t <= 1000]
    assert max(ticks) > MAX_HEATMAP_ROWS and all(t == int(t) for t in ticks)
    text = section_prompts(stats, [], [])
    assert "Grey: no estimate yet, because the prompt had not been drawn by that evaluation" in text
    assert "(every one at step 0, before the first step)" in text
    assert "by step 20, 700 of the 1,000 prompts had been drawn, 300 not yet." in text


def test_the_prompts_by_their_latest_group_are_the_curves_panel_in_its_words_and_numbers():
    """The text under the heatmap and the curves' panel read the same counts (metrics.jsonl's, by the latest group)
    with the same words, solved included (before: the panel left `solved` out and the text counted the heatmap's
    moving averages with the same words: other numbers)."""
    from tinygrpo.run.report.curves import curves_figure
    from tinygrpo.run.report.prompts import section_prompts

    counts = [(5, 3, 1, 1), (3, 2, 4, 1)]  # at steps 10 and 20, in PROMPT_GROUP_WORDS' order
    metrics = [{"step": 0, "eval/accuracy": 0.5}] + [
        {"step": 10 * i, "reward": 0.5} | {k: c for (k, _), c in zip(PROMPT_GROUP_WORDS, row, strict=True)}
        for i, row in enumerate(counts, 1)
    ]
    # the moving averages: 9 drawn, 1 not, all of them strictly between 0 and 1 (none "solved" by that measure)
    stats = [{"step": 20, "pass_rate": [0.5] * 9 + [None]}]
    text = section_prompts(stats, [], metrics)
    said = "at step 20: 3 unsolved, 2 partly solved, 4 solved, 1 unseen."
    assert f"By their latest group (the curves' panel of that name), {said}" in text
    heatmap_text = text.split("<p>")[1]  # the heatmap's own measure gets none of the category words
    assert not re.search(r"\b(unsolved|partly|solved|unseen)\b", heatmap_text), heatmap_text
    (ax,) = [
        a for a in curves_figure(metrics).axes if a.get_title() == "training prompts, by their latest group"
    ]
    lines = {line.get_label(): line.get_ydata()[-1] for line in ax.get_lines()}
    assert lines == {w: c for (_, w), c in zip(PROMPT_GROUP_WORDS, counts[-1], strict=True)}


def test_a_curve_of_fewer_than_three_points_is_markers_alone():
    """Early in a run (or in a short one) held-out accuracy has two points, the step-0 evaluation and the next, and a
    line between them draws a trend nobody measured: such a curve is markers alone, a longer one a line."""
    from tinygrpo.run.report.curves import curves_figure

    metrics = [{"step": 0, "eval/accuracy": 0.5, "time/elapsed": 0.0, "num_completions": 0}]
    metrics += [{"step": s, "reward": 0.1 * s, "time/elapsed": s, "num_completions": 8 * s} for s in (10, 20)]
    metrics[-1]["eval/accuracy"] = 0.7
    metrics.append({"step": 30, "reward": 0.9})
    axes = {ax.get_title(): ax for ax in curves_figure(metrics).axes}
    (reward,) = axes["sampled reward (mean)"].get_lines()
    assert len(reward.get_xdata()) == 3 and reward.get_linestyle() == "-"
    for title in (
        "held-out greedy accuracy (and by problem kind)",
        "held-out greedy accuracy against seconds",
        "held-out greedy accuracy against completions",
    ):
        (accuracy,) = axes[title].get_lines()
        assert len(accuracy.get_xdata()) == 2, title
        assert accuracy.get_linestyle() == "None" and accuracy.get_marker() == "o", title


def test_a_section_with_nothing_to_show_is_left_out_with_its_link(tmp_path):
    """Hand-written logs of a run that wrote only some: each section it has nothing for goes, its link too, and the
    run section names what was not recorded (before: each stayed, a heading over one 'Not recorded' line)."""
    metrics = [{"step": 0, "eval/accuracy": 0.5}, {"step": 2, "reward": 0.5}]
    _write_logs(tmp_path, {"metrics.jsonl": metrics})
    text = build_report(tmp_path)
    shown = re.findall(r'<section id="(\w+)">', text)
    assert shown == ["run", "curves"] and re.findall(r'<a href="#(\w+)">', text) == shown
    said = _run_row(text, NOT_RECORDED)
    assert [log in said for log in ("completions.jsonl", "prompt_stats.jsonl", "eval_failures.jsonl")] == [
        True
    ] * 3
    # completions of an older version (no per-token numbers) and held-out failures: groups and prompts, no tokens
    completions = [
        {"step": 2, "prompt": "1+1=", "completion": f"{a}<eos>", "reward": float(a == 2)} for a in (2, 3)
    ]
    failures = [{"step": 2, "total": 4, "failures": [["1+2=", "3", "4<eos>"]]}]
    _write_logs(tmp_path, {"completions.jsonl": completions, "eval_failures.jsonl": failures})
    text = build_report(tmp_path)
    shown = re.findall(r'<section id="(\w+)">', text)
    assert shown == ["run", "curves", "groups", "prompts"] and re.findall(r'<a href="#(\w+)">', text) == shown
    prompts = _section(text, "prompts")  # its one part with content: no heading over nothing
    assert re.findall(r"<h3>(.*?)</h3>", prompts) == [
        "Held-out problems answered wrong at the last evaluation"
    ]
    said = _run_row(text, NOT_RECORDED)
    assert "per-token probabilities in completions.jsonl" in said and "eval_failures.jsonl" not in said


def test_the_reproduce_command_of_a_default_run_is_the_bare_command():
    """Defaults as the config resolves them: a run of the default length is not reproduced with --max_steps."""
    from dataclasses import asdict

    from tinygrpo.run.config import GRPOConfig, parse_config
    from tinygrpo.run.report.run import reproduce_command

    assert reproduce_command(asdict(GRPOConfig())) == "accelerate launch train_grpo.py"
    cfg = parse_config("--num_mini_batches 4 --max_generations 3".split())
    cmd = reproduce_command(asdict(cfg))
    assert parse_config(cmd.split()[3:]) == cfg  # (the command gives the same config back)
