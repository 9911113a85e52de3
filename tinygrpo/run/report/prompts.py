"""Per prompt: the pass-rate estimates over time, the held-out failures, accuracy by problem kind, and (small problem sets) the beliefs."""

from __future__ import annotations

import warnings

from .html import _e, _missing, _pct, _png
from .logs import (
    MAX_HEATMAP_ROWS,
)

FAILURES_SHOWN = 20  # held-out failures listed on the page; eval_failures.jsonl holds them all


def section_prompts(stats: list[dict], failures: list[dict], metrics: list[dict]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = ['<section id="prompts"><h2>Prompts</h2><h3>Pass rates of the training prompts over time</h3>']
    if stats:
        m = np.array([[np.nan if v is None else v for v in r["pass_rate"]] for r in stats], dtype=float).T
        order = np.argsort(np.nan_to_num(m[:, -1], nan=-1.0), kind="stable")
        m = m[order]
        bins = np.array_split(np.arange(m.shape[0]), min(MAX_HEATMAP_ROWS, m.shape[0]))
        with warnings.catch_warnings():  # a bin whose prompts are unseen at some evaluation: NaN, drawn grey
            warnings.simplefilter("ignore", RuntimeWarning)
            binned = np.stack(
                [np.nanmean(m[b], axis=0) if np.isfinite(m[b]).any() else m[b][0] for b in bins]
            )
        fig, ax = plt.subplots(figsize=(10, 4.5))
        cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#cccccc")
        im = ax.imshow(
            np.ma.masked_invalid(binned), aspect="auto", cmap=cmap, vmin=0, vmax=1, interpolation="nearest"
        )
        steps = [r["step"] for r in stats]
        ticks = sorted({0, len(steps) - 1, *range(0, len(steps), max(1, len(steps) // 8))})
        ax.set_xticks(ticks, [str(steps[t]) for t in ticks])
        ax.set(xlabel="step (evaluations)", ylabel=f"{m.shape[0]} prompts, by final estimate (binned)")
        fig.colorbar(im, ax=ax, label="pass-rate estimate (grey: not sampled yet)")
        fig.tight_layout()
        final = m[:, -1]
        seen = ~np.isnan(final)
        out.append(
            _png(fig)
            + f"<p>At step {steps[-1]}: {int((final[seen] == 0).sum())} prompts estimated unsolved, "
            f"{int(((final[seen] > 0) & (final[seen] < 1)).sum())} in between, {int((final[seen] >= 1).sum())} "
            f"solved, {int((~seen).sum())} never sampled.</p>"
        )
    else:
        out.append(_missing("prompt_stats.jsonl: written by runs of this version with an evaluation split"))

    out.append("<h3>Held-out problems answered wrong at the last evaluation</h3>")
    if failures:
        last = failures[-1]
        fails = last["failures"]
        rows = "".join(
            f"<tr><td><code>{_e(p)}</code></td><td>{_e(a)}</td><td><code>{_e(c)}</code></td></tr>"
            for p, a, c in fails[:FAILURES_SHOWN]
        )
        more = (
            f"<p>The first {FAILURES_SHOWN} of {len(fails)}; every one is in eval_failures.jsonl.</p>"
            if len(fails) > FAILURES_SHOWN
            else ""
        )
        trend = ", ".join(
            f"{r['step']}: {len(r['failures'])}" for r in failures[:: max(1, len(failures) // 10)]
        )
        out.append(
            f"<p>Step {last['step']}: {len(fails)} wrong of {last['total']} (wrong by step: {_e(trend)}).</p>"
            + (
                f"<table><tr><th>prompt</th><th>gold</th><th>greedy completion</th></tr>{rows}</table>{more}"
                if fails
                else ""
            )
        )
    else:
        out.append(_missing("eval_failures.jsonl"))

    out.append("<h3>Held-out accuracy by problem kind</h3>")
    evals = [r for r in metrics if any(k.startswith("eval/accuracy/") for k in r)]
    if evals:
        kinds = sorted(k for k in evals[-1] if k.startswith("eval/accuracy/"))
        head = "".join(f"<th>{_e(k.split('/')[-1])}</th>" for k in kinds)
        body = "".join(
            f"<tr><th>step {r['step']}</th>" + "".join(f"<td>{_pct(r.get(k))}</td>" for k in kinds) + "</tr>"
            for r in (evals[0], evals[-1])
        )
        out.append(f"<table><tr><th></th>{head}</tr>{body}</table>")
    else:
        out.append(
            _missing("the task defines no kinds of problem (a task's `kinds`: addition's carries, say)")
        )
    return "".join(out) + "</section>"


def section_beliefs(beliefs: list[dict]) -> str:
    """Only with beliefs.jsonl (logged when the evaluation set is small, e.g. the seed bank): '' otherwise."""
    head = '<section id="beliefs"><h2>Beliefs</h2>'
    if not beliefs:
        return ""
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
