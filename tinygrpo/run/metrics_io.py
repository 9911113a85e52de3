"""The run's JSON-lines logs (metrics.jsonl, completions.jsonl and the evaluation details): writing them, the one
reader of them, cutting them back on resume, and the one figure of a run's curves (plots.png and the report's).

A log is written one complete line at a time (JsonlWriter), so the only damage a kill or a full disk can do is a torn
last line: the line was cut mid-write and has no trailing newline. The reader drops that line and nothing else; any
other line that is not a JSON object is an error naming the file and the line, since it was not written by a
JsonlWriter (an edited, truncated-and-appended or foreign file) and silently skipping it would misreport the run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tinygrpo.data.writes import append_whole, write_atomic, writing
from tinygrpo.run.config import ConfigError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

TIMING_PREFIXES = ("time/", "throughput/")  # the only keys that may differ between identical runs
CURVES_DPI = 100  # plots.png and the report's curves: the same figure, the same pixels
_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


class JsonlError(ConfigError):
    """A JSON-lines log that cannot be read, with its file and line number. A ConfigError, so that train_grpo.py
    (on resume) and `python -m tinygrpo.run.report` print it as one `error:` line."""


class JsonlWriter:
    """Appends one JSON object per line, flushed at once (a killed run keeps every line it wrote); a line that cannot
    be written whole is not written at all (writes.append_whole)."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path = Path(path)
        self.enabled = enabled

    def write(self, obj: dict) -> None:
        if self.enabled:
            append_whole(self.path, (json.dumps(obj, sort_keys=True) + "\n").encode())


def read_jsonl_lines(path: Path) -> list[tuple[int, bytes, dict]]:
    """(line number, the line as written, its object) for each line of a JSON-lines file, in order; [] when the file
    does not exist. Blank lines are skipped; a torn last line (no trailing newline, does not parse) is dropped;
    any other line that does not parse, or parses to something other than an object, raises JsonlError."""
    path = Path(path)
    if not path.is_file():
        return []
    # the last item is b"" unless the file ends in an unterminated line
    lines = path.read_bytes().split(b"\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:  # (bytes are decoded as UTF-8: a bad byte is a UnicodeDecodeError, a ValueError too)
            obj = json.loads(line)
        except ValueError as e:
            if number == len(lines):  # cut mid-write (a kill, a full disk): the lines before it are whole
                break
            what = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
            raise JsonlError(f"{path} line {number}: not JSON ({what})") from None
        if not isinstance(obj, dict):
            kind = _JSON_TYPES.get(type(obj), "null")
            raise JsonlError(f"{path} line {number}: {kind} where a JSON object belongs")
        rows.append((number, line, obj))
    return rows


def read_jsonl(path: Path) -> list[dict]:
    """The objects of a JSON-lines log (see read_jsonl_lines for what is dropped and what is an error)."""
    return [obj for _, _, obj in read_jsonl_lines(path)]


def truncate_after_step(path: Path, step: int) -> None:
    """Drop lines logged after `step` (on resume, those steps are about to be redone), and a torn last line: the
    rewritten file holds complete lines only, so the resumed run's first line does not land on a cut one. Lines
    without a step are kept; the lines kept are copied byte for byte."""
    path = Path(path)
    if not path.is_file():
        return
    kept = []
    for number, line, obj in read_jsonl_lines(path):
        s = obj.get("step", 0)
        if not isinstance(s, int | float) or isinstance(s, bool):
            raise JsonlError(f"{path} line {number}: 'step' is {json.dumps(s)[:40]}, not a number")
        if s <= step:
            kept.append(line + b"\n")
    write_atomic(path, b"".join(kept))


# ----------------------------------------------------------------------------------------------- checked rows
# A reader of a log (the report) says what it needs of each row: the keys it indexes and the kind of each value it
# formats or draws. A row that lacks one is a JsonlError naming the file and the line, not a KeyError or TypeError
# from deep inside the reader.

Check = tuple[Callable[[object], bool], str]  # (test of a value, what the value should be)
INT: Check = (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer")
NUM: Check = (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number")
NUM_OR_NULL: Check = (lambda v: v is None or NUM[0](v), "a number or null")
STR: Check = (lambda v: isinstance(v, str), "a string")


def list_of(check: Check) -> Check:
    return (lambda v: isinstance(v, list) and all(check[0](x) for x in v), f"a list, each item {check[1]}")


def by_name(check: Check) -> Check:
    return (
        lambda v: isinstance(v, dict) and all(check[0](x) for x in v.values()),
        f"an object, each value {check[1]}",
    )


class Shape(NamedTuple):
    """What each row of a log must hold: `required` keys, and the kind of value of these and of `optional` ones
    (an optional key ending in "/" stands for every key it begins); `same_length`: a list key whose length must be
    the same in every row (the columns of one heatmap)."""

    required: dict[str, Check]
    optional: dict[str, Check] = {}  # (one dict shared by the Shapes that omit it: never mutated)
    same_length: str = ""


def read_checked(path: Path, shape: Shape) -> list[dict]:
    """read_jsonl, each row checked against `shape`: the first row that does not fit raises JsonlError."""
    prefixes = [(k, c) for k, c in shape.optional.items() if k.endswith("/")]
    rows: list[dict] = []
    for number, _, row in read_jsonl_lines(path):
        where = f"{path} line {number}"
        if missing := [k for k in shape.required if k not in row]:
            raise JsonlError(f"{where}: no {missing[0]!r} in the row")
        for key, value in row.items():
            check = shape.required.get(key) or shape.optional.get(key)
            check = check or next((c for p, c in prefixes if key.startswith(p)), None)
            if check is not None and not check[0](value):
                shown = json.dumps(value)
                shown = shown if len(shown) <= 40 else shown[:37] + "..."
                raise JsonlError(f"{where}: {key!r} should be {check[1]}, not {shown}")
        if shape.same_length and rows and len(row[shape.same_length]) != len(rows[0][shape.same_length]):
            n, first = len(row[shape.same_length]), len(rows[0][shape.same_length])
            raise JsonlError(f"{where}: {shape.same_length!r} has {n} items, the first row {first}")
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------- the curves


FORMAT_PREFIXES = ("eval/format/", "completions/format/")  # + a format's name (tinygrpo/run/evaluation.py)
_FORMAT_SOURCES = (("eval/", "greedy"), ("completions/", "sampled"))
# The training prompts by their latest group (PromptStats.counts), each key with its word: the curves' panel and the
# report's text under its pass-rate heatmap both read these, so the two say the same thing in the same words.
PROMPT_GROUPS = (
    ("prompts/unsolved", "unsolved"),
    ("prompts/partly_solved", "partly solved"),
    ("prompts/solved", "solved"),
    ("prompts/unseen", "unseen"),
)
# A curve of fewer points is drawn as markers alone: a line through two points (the step-0 evaluation and the next,
# early in a run or in a short one) draws a trend nobody measured.
MIN_LINE_POINTS = 3


class Panel(NamedTuple):
    """One panel of the curves figure: `ys` (metric, legend label) drawn against `x`; key names the panel."""

    key: str
    title: str
    x: str
    ys: tuple[tuple[str, str], ...]
    xlabel: str


def _num(v: object) -> bool:
    return NUM[0](v)


def curve_panels(rows: list[dict]) -> list[Panel]:
    """The nine panels, row by row: (1) reward, held-out accuracy overall and by problem kind, KL to the reference
    (or, when none is logged, the policy's entropy); (2) where the samples went, the training prompts by their
    latest group, accuracy by problem kind at the first and last evaluation; (3) held-out accuracy against training
    seconds and against completions sampled (the cost of the accuracy), completion lengths (of the right and the
    wrong ones too). Where the task defines formats of completion, two more: the share of each format (held-out
    greedy and sampled) and the held-out accuracy within each."""
    kinds = sorted({k for r in rows for k in r if k.startswith("eval/accuracy/")})
    by_kind = tuple((k, k.split("/")[-1]) for k in kinds)
    formats = sorted({k.split("/")[-1] for r in rows for k in r if k.startswith(FORMAT_PREFIXES)})
    has_kl = any("kl" in r for r in rows)
    return [
        Panel("reward", "sampled reward (mean)", "step", (("reward", ""),), "step"),
        Panel(
            "eval/accuracy",
            "held-out greedy accuracy (and by problem kind)",
            "step",
            (("eval/accuracy", "all"), *by_kind),
            "step",
        ),
        Panel("kl", "KL to the reference (mean per token)", "step", (("kl", ""),), "step")
        if has_kl
        else Panel("entropy", "policy entropy (nats per token)", "step", (("entropy", ""),), "step"),
        Panel(
            "frac_reward_zero_std",
            "where the samples went",
            "step",
            (
                ("frac_reward_zero_std", "zero-variance groups"),
                ("frac_completions_with_signal", "with signal"),
            ),
            "step",
        ),
        Panel(
            "prompts/unsolved",
            "training prompts, by their latest group",
            "step",
            PROMPT_GROUPS,
            "step",
        ),
        Panel("kinds", "held-out accuracy by problem kind, first and last", "", by_kind, "problem kind"),
        Panel(
            "accuracy_vs_seconds",
            "held-out greedy accuracy against seconds",
            "time/elapsed",
            (("eval/accuracy", ""),),
            "training seconds (evaluation excluded)",
        ),
        Panel(
            "accuracy_vs_completions",
            "held-out greedy accuracy against completions",
            "num_completions",
            (("eval/accuracy", ""),),
            "completions sampled",
        ),
        Panel(
            "completions/mean_length",
            "completion length (tokens, EOS included)",
            "step",
            (
                ("completions/mean_length", "mean"),
                ("completions/max_length", "max"),
                ("completions/mean_length_right", "right"),
                ("completions/mean_length_wrong", "wrong"),
            ),
            "step",
        ),
    ] + (
        [
            Panel(
                "formats",
                "share of each completion format (held-out greedy; sampled)",
                "step",
                tuple((f"{p}format/{f}", f"{f} ({w})") for p, w in _FORMAT_SOURCES for f in formats),
                "step",
            ),
            Panel(
                "format_accuracy",
                "held-out greedy accuracy within each format",
                "step",
                tuple((f"eval/format_accuracy/{f}", f) for f in formats),
                "step",
            ),
        ]
        if formats
        else []
    )


def _draw_lines(ax: Axes, rows: list[dict], panel: Panel) -> bool:
    drawn = 0
    for y, label in panel.ys:
        pts = [(r[panel.x], r[y]) for r in rows if _num(r.get(panel.x)) and _num(r.get(y))]
        if pts:
            xs, ys = zip(*pts, strict=True)
            few = len(pts) < MIN_LINE_POINTS
            marker = "o" if len(pts) < 30 else None
            ax.plot(xs, ys, linestyle="none" if few else "-", marker=marker, ms=5 if few else 3, label=label)
            drawn += 1
    if drawn and len(panel.ys) > 1:
        ax.legend(fontsize=7)
    return drawn > 0


def _draw_kind_bars(ax: Axes, rows: list[dict], panel: Panel) -> bool:
    kinds = [k for k, _ in panel.ys]
    evals = [r for r in rows if any(_num(r.get(k)) for k in kinds)]
    if not evals:
        return False
    for j, (r, label) in enumerate(((evals[0], "first"), (evals[-1], "last"))):
        heights = [r[k] if _num(r.get(k)) else 0 for k in kinds]
        ax.bar(
            [i + (j - 0.5) * 0.4 for i in range(len(kinds))],
            heights,
            width=0.4,
            label=f"{label} (step {r['step']})",
        )
    ax.set_xticks(range(len(kinds)), [name for _, name in panel.ys], fontsize=8)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    return True


def curves_figure(rows: list[dict]) -> Figure:
    """The run's curves from its metrics rows, three panels a row (see curve_panels), as a matplotlib Figure of its
    own, not pyplot's: no global state, nothing to close, safe beside a pyplot the caller may use."""
    from matplotlib.figure import Figure

    panels = curve_panels(rows)
    n_rows = -(-len(panels) // 3)
    fig = Figure(figsize=(15, 3.5 * n_rows))
    axes = fig.subplots(n_rows, 3).flat
    for ax in axes[len(panels) :]:
        ax.remove()
    for ax, panel in zip(axes, panels, strict=False):
        ax.set_title(panel.title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_xlabel(panel.xlabel)
        drawn = (_draw_kind_bars if panel.key == "kinds" else _draw_lines)(ax, rows, panel)
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def plot_metrics(metrics_path: Path, out_path: Path) -> list[str]:
    """Write the curves figure of metrics.jsonl to out_path (plots.png); returns the panels' keys, row by row."""
    rows = read_jsonl(metrics_path)
    tmp = Path(out_path).with_name(Path(out_path).name + ".tmp")
    with writing(out_path, temp_files=[tmp], own_name=False):  # (no half-drawn plots.png, no temporary left)
        curves_figure(rows).savefig(tmp, dpi=CURVES_DPI, format="png")
        os.replace(tmp, out_path)
    return [panel.key for panel in curve_panels(rows)]
