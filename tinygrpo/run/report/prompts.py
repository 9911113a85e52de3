"""Per prompt: the pass-rate estimates over time, the held-out failures, accuracy by problem kind, and (small problem sets) the beliefs."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from tinygrpo.run.report.curves import PROMPT_GROUPS
from tinygrpo.run.report.html import NO_FIGURE, _e, _pct, _png
from tinygrpo.run.report.logs import MAX_HEATMAP_ROWS

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure

FAILURES_SHOWN = 20  # held-out failures listed on the page; eval_failures.jsonl holds them all


def pass_rates(stats: list[dict]) -> np.ndarray:
    """(prompts, evaluations) pass-rate estimates of prompt_stats.jsonl (NaN: the prompt not drawn yet), its rows
    sorted by the last evaluation's estimate, the undrawn first."""
    import numpy as np

    m = np.array([[np.nan if v is None else v for v in r["pass_rate"]] for r in stats], dtype=float).T
    return m[np.argsort(np.nan_to_num(m[:, -1], nan=-1.0), kind="stable")]


def binned(m: np.ndarray) -> np.ndarray:
    """At most MAX_HEATMAP_ROWS rows: the mean of consecutive prompts (a picture has only so many pixel rows); a bin
    whose prompts are all undrawn at an evaluation stays NaN there."""
    import numpy as np

    bins = np.array_split(np.arange(m.shape[0]), min(MAX_HEATMAP_ROWS, m.shape[0]))
    with warnings.catch_warnings():  # (nanmean of an all-NaN column: NaN, as wanted, with a warning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.stack([np.nanmean(m[b], axis=0) for b in bins])


def pass_rate_figure(m: np.ndarray, steps: list[int]) -> Figure:
    """The heatmap: a column an evaluation, the prompts down, in prompt units (bins are drawn over the prompts they
    hold, so the ticks count prompts, not bins), grey where a prompt has no estimate."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    n = m.shape[0]
    fig = Figure(figsize=(10, 4.5))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#cccccc")
    im = ax.imshow(
        binned(m),
        aspect="auto",
        cmap=cmap,
        vmin=0,
        vmax=1,
        interpolation="nearest",
        extent=(-0.5, len(steps) - 0.5, n, 0),
    )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ticks = sorted({0, len(steps) - 1, *range(0, len(steps), max(1, len(steps) // 8))})
    ax.set_xticks(ticks, [str(steps[t]) for t in ticks])
    ax.set(xlabel="step (evaluations)", ylabel=f"{n:,} training prompts, sorted by the last estimate")
    fig.colorbar(im, ax=ax, label="pass-rate estimate (grey: not drawn yet)")
    fig.tight_layout()
    return fig


def latest_groups(metrics: list[dict]) -> tuple[int, list[tuple[str, int]]] | None:
    """(step, [(word, count)]) of the last metrics row that counts the training prompts by their latest group: the
    last point of the curves' panel of that name (None for runs of versions that did not count them)."""
    rows = [r for r in metrics if all(k in r for k, _ in PROMPT_GROUPS)]
    if not rows:
        return None
    return rows[-1]["step"], [(word, int(rows[-1][k])) for k, word in PROMPT_GROUPS]


def _pass_rates_text(
    m: np.ndarray, steps: list[int], groups: tuple[int, list[tuple[str, int]]] | None
) -> str:
    """What the heatmap shows, why it is grey where it is, and the prompts by their latest group (the panel's words
    and numbers: the heatmap's estimate is another measure, so it gets no category words of its own)."""
    import numpy as np

    n = m.shape[0]
    undrawn = int(np.isnan(m[:, -1]).sum())
    rows = f" (binned: about {n / MAX_HEATMAP_ROWS:.0f} prompts a row)" if n > MAX_HEATMAP_ROWS else ""
    # (the evaluation at step 0 comes before any prompt is drawn: a whole grey column, worth saying why)
    first = f" (every one at step {steps[0]}, before the first step)" if np.isnan(m[:, 0]).all() else ""
    text = (
        f"<p>Each row is a training prompt{rows}, sorted by its pass-rate estimate at the last evaluation (a "
        "moving average of its groups' mean rewards, pass_rate_ema); each column is an evaluation. Grey: no "
        f"estimate yet, because the prompt had not been drawn by that evaluation{first}. A run draws only so many "
        "prompts a step, so a short run on many prompts is mostly grey: "
        f"by step {steps[-1]}, {n - undrawn:,} of the {n:,} prompts had been drawn, {undrawn:,} not yet.</p>"
    )
    if groups is not None:
        step, counts = groups
        said = ", ".join(f"{c:,} {word}" for word, c in counts)
        text += f"<p>By their latest group (the curves' panel of that name), at step {step}: {said}.</p>"
    return text


def _failures_part(failures: list[dict]) -> str:
    """The last evaluation's wrong answers, the first FAILURES_SHOWN of them, and how many more the log holds."""
    last = failures[-1]
    fails = last["failures"]
    rows = "".join(
        f"<tr><td><code>{_e(p)}</code></td><td>{_e(a)}</td><td><code>{_e(c)}</code></td></tr>"
        for p, a, c in fails[:FAILURES_SHOWN]
    )
    rest = len(fails) - FAILURES_SHOWN
    more = (
        f"<p>The first {FAILURES_SHOWN} of {len(fails)}; the other {rest} are in eval_failures.jsonl (its last "
        "line).</p>"
        if rest > 0
        else ""
    )
    trend = ", ".join(f"{r['step']}: {len(r['failures'])}" for r in failures[:: max(1, len(failures) // 10)])
    table = f"<table><tr><th>prompt</th><th>gold</th><th>greedy completion</th></tr>{rows}</table>{more}"
    return (
        "<h3>Held-out problems answered wrong at the last evaluation</h3>"
        f"<p>Step {last['step']}: {len(fails)} wrong of {last['total']} (wrong by step: {_e(trend)}).</p>"
        + (table if fails else "")
    )


def _kinds_part(metrics: list[dict]) -> str:
    """Held-out accuracy by problem kind at the first and last evaluation ('' when the task defines no kinds)."""
    evals = [r for r in metrics if any(k.startswith("eval/accuracy/") for k in r)]
    if not evals:
        return ""
    kinds = sorted(k for k in evals[-1] if k.startswith("eval/accuracy/"))
    head = "".join(f"<th>{_e(k.split('/')[-1])}</th>" for k in kinds)
    body = "".join(
        f"<tr><th>step {r['step']}</th>" + "".join(f"<td>{_pct(r.get(k))}</td>" for k in kinds) + "</tr>"
        for r in (evals[0], evals[-1])
    )
    return f"<h3>Held-out accuracy by problem kind</h3><table><tr><th></th>{head}</tr>{body}</table>"


def section_prompts(
    stats: list[dict], failures: list[dict], metrics: list[dict], figures: bool = True
) -> str:
    """The pass rates, the held-out failures and accuracy by kind, each where the run logged it; '' with none."""
    parts = []
    if stats:
        m, steps = pass_rates(stats), [r["step"] for r in stats]
        parts.append(
            "<h3>Pass rates of the training prompts over time</h3>"
            + (_png(pass_rate_figure(m, steps)) if figures else NO_FIGURE)
            + _pass_rates_text(m, steps, latest_groups(metrics))
        )
    if failures:
        parts.append(_failures_part(failures))
    parts.append(_kinds_part(metrics))
    body = "".join(parts)
    return f'<section id="prompts"><h2>Prompts</h2>{body}</section>' if body else ""


def section_beliefs(beliefs: list[dict], figures: bool = True) -> str:
    """Only with beliefs.jsonl (logged when the evaluation set is small, e.g. the seed bank): '' otherwise."""
    if not beliefs:
        return ""
    head = '<section id="beliefs"><h2>Beliefs</h2>'
    if not figures:
        return head + NO_FIGURE + "</section>"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    picks = [beliefs[0], beliefs[len(beliefs) // 2], beliefs[-1]]
    fig, axes = plt.subplots(1, 3, figsize=(15, 0.18 * len(picks[0]["questions"]) + 2), sharey=True)
    for ax, b in zip(axes, picks, strict=True):
        ax.imshow(b["probs"], aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks(range(len(b["answers"])), b["answers"], fontsize=7)
        ax.set_yticks(range(len(b["questions"])), b["questions"], fontsize=7)
        gold = {a: i for i, a in enumerate(b["answers"])}
        for q, g in enumerate(b["gold"]):
            if g in gold:
                ax.add_patch(
                    matplotlib.patches.Rectangle((gold[g] - 0.5, q - 0.5), 1, 1, fill=False, ec="red", lw=1)
                )
        ax.set(title=f"step {b['step']}", xlabel="answer")
    fig.tight_layout()
    return (
        head
        + "<p>P(answer + &lt;eos&gt; | question) under the policy at the first, middle and last evaluation; the "
        "red box is the gold answer. The tabular oracle of the seed tutorials holds one such row per question "
        "(<code>python -m studies.compare</code> shows the table's beside the GPT's).</p>"
        + _png(fig)
        + "</section>"
    )
