"""The one figure of a run's curves (plots.png, and the report's): which panels its metrics give (curve_panels), and
the figure itself (curves_figure, plot_metrics), from metrics.jsonl alone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tinygrpo.base.files import writing

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

from tinygrpo.run.logs import NUM, read_jsonl

CURVES_DPI = 100  # plots.png and the report's curves: the same figure, the same pixels


FORMAT_PREFIXES = (
    "eval/format/",
    "completions/format/",
)  # + a format's name (tinygrpo/rollout/evaluation.py)
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


# The panels whose lines do not depend on the run (each: its key, title, x, the lines and their labels, x label).
_STEP = "step"
_KL = Panel("kl", "KL to the reference (mean per token)", _STEP, (("kl", ""),), _STEP)
_ENTROPY = Panel("entropy", "policy entropy (nats per token)", _STEP, (("entropy", ""),), _STEP)
_SIGNAL = (("frac_reward_zero_std", "zero-variance groups"), ("frac_completions_with_signal", "with signal"))
_WORDS = (("mean_length", "mean"), ("max_length", "max"), ("mean_length_right", "right"))
_LENGTHS = tuple((f"completions/{k}", w) for k, w in (*_WORDS, ("mean_length_wrong", "wrong")))
_ACCURACY = (("eval/accuracy", ""),)
_AGAINST_COST = [
    Panel("accuracy_vs_seconds", "held-out greedy accuracy against seconds", "time/elapsed", _ACCURACY,
          "training seconds (evaluation excluded)"),
    Panel("accuracy_vs_completions", "held-out greedy accuracy against completions", "num_completions", _ACCURACY,
          "completions sampled"),
    Panel("completions/mean_length", "completion length (tokens, EOS included)", _STEP, _LENGTHS, _STEP),
]  # fmt: skip


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
    accuracy = (("eval/accuracy", "all"), *by_kind)
    panels = [
        Panel("reward", "sampled reward (mean)", _STEP, (("reward", ""),), _STEP),
        Panel("eval/accuracy", "held-out greedy accuracy (and by problem kind)", _STEP, accuracy, _STEP),
        _KL if any("kl" in r for r in rows) else _ENTROPY,
        Panel("frac_reward_zero_std", "where the samples went", _STEP, _SIGNAL, _STEP),
        Panel("prompts/unsolved", "training prompts, by their latest group", _STEP, PROMPT_GROUPS, _STEP),
        Panel("kinds", "held-out accuracy by problem kind, first and last", "", by_kind, "problem kind"),
        *_AGAINST_COST,
    ]
    if formats:
        shares = tuple((f"{p}format/{f}", f"{f} ({w})") for p, w in _FORMAT_SOURCES for f in formats)
        within = tuple((f"eval/format_accuracy/{f}", f) for f in formats)
        panels.append(
            Panel(
                "formats", "share of each completion format (held-out greedy; sampled)", _STEP, shares, _STEP
            )
        )
        panels.append(
            Panel("format_accuracy", "held-out greedy accuracy within each format", _STEP, within, _STEP)
        )
    return panels


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
