"""report.html: one self-contained page of what a run did, from its output directory alone.

    python -m tinygrpo.report RUN_DIR            # any run: finished, interrupted or in progress, of this or older code

The trainer writes it at the end of every run. It reads only the run directory's files (config.json, metrics.jsonl,
completions.jsonl and, where the run wrote them, prompt_stats.jsonl, eval_failures.jsonl, beliefs.jsonl) and says
which were missing; a log it cannot read is one `error:` line naming the file and the line (exit code 1). Figures are
PNGs drawn with matplotlib and inlined as data URIs; there is no script, no stylesheet to fetch, no network: the file
opens from disk and can be attached to an issue.

Sections: the run (summary, settings, the command that reproduces it); curves (plots.png's figure: reward, held-out
accuracy by step, by problem kind, against seconds and against completions, signal, KL or entropy, prompts by their
latest group, lengths); sampled groups (the logged completions of each logged step, coloured by reward, with
advantages and gold answers); tokens (the groups with signal of the last logged steps drawn token by token, each
token coloured by its advantage, with its probability before and after the step's update, their ratio and the
entropy on hover and in a table); prompts (pass-rate estimates of the training prompts over time, held-out failures
at the end, accuracy by problem kind); beliefs (on a small problem set: the policy's probability of each answer for each
question at the first, middle and last evaluation).
"""

from __future__ import annotations

import base64
import html
import io
import json
import shlex
import sys
import warnings
from pathlib import Path

from .metrics_io import (
    CURVES_DPI,
    FORMAT_PREFIXES,
    INT,
    NUM,
    NUM_OR_NULL,
    STR,
    Check,
    JsonlError,
    Shape,
    by_name,
    curve_panels,
    curves_figure,
    list_of,
    read_checked,
)
from .writes import write_atomic

REPORT_FILE = "report.html"
MAX_GROUP_STEPS = 30  # logged steps shown in the groups section (evenly spaced, the last one included)
MAX_HEATMAP_ROWS = 300  # prompts are binned into at most this many rows
MAX_TOKEN_STEPS = 4  # logged steps in the tokens section: the last one (open) and the ones before it
MAX_TOKEN_GROUPS = 4  # groups with signal drawn per step
# The per-token lists of a completions.jsonl row (tinygrpo/run_logs.py TOKEN_KEYS: runs of older versions lack them).
TOKEN_NUMBERS = ("token_advantage", "token_p_old", "token_p_new", "token_ratio", "token_entropy")


# What the report reads in each log's rows (metrics_io.read_checked): the keys it indexes, and the kind of each value
# it formats or draws. Keys it does not read are not checked: older and newer runs log other things.
_CURVE_KEYS = {k for p in curve_panels([]) for k in (p.x, *(y for y, _ in p.ys)) if k}
_TRIPLES: Check = (lambda v: isinstance(v, list) and len(v) == 3, "a [prompt, gold, completion]")
_TABLE: Check = (  # what imshow draws: non-empty, rectangular
    lambda v: list_of(list_of(NUM))[0](v) and len({len(r) for r in v}) == 1 and bool(v and v[0]),
    "a table of numbers (equal-length lists)",
)
LOGS = {
    "metrics.jsonl": Shape(
        {"step": INT},
        dict.fromkeys(_CURVE_KEYS, NUM)
        | {"eval/accuracy/": NUM_OR_NULL, "eval/format_accuracy/": NUM}
        | dict.fromkeys(FORMAT_PREFIXES, NUM),
    ),
    "completions.jsonl": Shape(
        {"step": INT, "prompt": STR, "completion": STR},
        {
            "reward": NUM_OR_NULL,
            "advantage": NUM,
            "rewards": by_name(NUM_OR_NULL),
            "tokens": list_of(STR),
            "group": INT,
        }
        | dict.fromkeys(TOKEN_NUMBERS, list_of(NUM)),
    ),
    "prompt_stats.jsonl": Shape({"step": INT, "pass_rate": list_of(NUM_OR_NULL)}, same_length="pass_rate"),
    "eval_failures.jsonl": Shape({"step": INT, "total": INT, "failures": list_of(_TRIPLES)}),
    "warnings.jsonl": Shape({"step": INT, "warning": STR}),
    "beliefs.jsonl": Shape(
        {"step": INT, "probs": _TABLE} | dict.fromkeys(("questions", "answers", "gold"), list_of(STR))
    ),
}


def read_log(run: Path, name: str) -> list[dict]:
    """The rows of RUN/name, checked against LOGS[name] (none when the file is missing; a torn last line dropped)."""
    return read_checked(run / name, LOGS[name])


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _png(fig, dpi: int = 80) -> str:
    """A matplotlib figure as an <img> with a data URI."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="figure" src="data:image/png;base64,{data}">'


def _e(x) -> str:
    return html.escape(str(x))


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _missing(what: str) -> str:
    return f'<p class="missing">Not recorded in this run ({_e(what)}).</p>'


# ----------------------------------------------------------------------------------------------- sections


def reproduce_command(config: dict) -> str:
    """`accelerate launch train_grpo.py` with the settings that differ from today's defaults (every setting the
    config holds that this version does not know is passed as it is)."""
    from dataclasses import MISSING, fields

    from .config import GRPOConfig

    defaults = {}
    for f in fields(GRPOConfig):
        if f.default is not MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not MISSING:
            defaults[f.name] = f.default_factory()
    argv = []
    for k, v in config.items():
        if k in defaults and defaults[k] == v:
            continue
        if isinstance(v, list):
            argv += [f"--{k}", *map(str, v)]
        elif v is None:
            argv += [f"--{k}", ""]
        else:
            argv += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
    return shlex.join(["accelerate", "launch", "train_grpo.py", *argv])


def section_run(run: Path, config: dict, metrics: list[dict], warnings: list[dict] = ()) -> str:
    evals = [r for r in metrics if "eval/accuracy" in r]
    steps = [r for r in metrics if "reward" in r]
    last = steps[-1] if steps else {}
    rows = [
        (
            "held-out greedy accuracy",
            f"{_pct(evals[0]['eval/accuracy'])} -> {_pct(evals[-1]['eval/accuracy'])}"
            if evals
            else "not evaluated",
        ),
        (
            "steps",
            f"{last.get('step', 0)} of {config.get('max_steps', '?')}"
            + ("" if last.get("step") == config.get("max_steps") else " (stopped early, or still running)"),
        ),
        ("completions sampled", f"{last.get('num_completions', 0):,}"),
        (
            "training seconds (evaluation excluded)",
            f"{last['time/elapsed']:.1f}" if "time/elapsed" in last else "n/a",
        ),
    ]
    rows += [(f"step {w['step']}", w["warning"]) for w in warnings]  # what the run said it could not learn
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    settings = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in sorted(config.items()))
    cmd = reproduce_command(config) if config else "(no config.json)"
    return (
        f'<section id="run"><h2>The run</h2><p>{_e(run)}</p><table>{table}</table>'
        f"<p>Reproduce it (from the repository root):</p><pre>{_e(cmd)}</pre>"
        f"<details><summary>All settings</summary><table>{settings}</table></details></section>"
    )


def section_curves(metrics: list[dict]) -> str:
    steps = [r for r in metrics if "reward" in r]
    evals = [r for r in metrics if "eval/accuracy" in r]
    if not steps and not evals:
        return '<section id="curves"><h2>Curves</h2>' + _missing("metrics.jsonl has no step") + "</section>"
    # plots.png's figure (metrics_io.plot_metrics), at its resolution: the same picture in both places
    return f'<section id="curves"><h2>Curves</h2>{_png(curves_figure(metrics), dpi=CURVES_DPI)}</section>'


def _colour(reward) -> str:
    """Red (0) to green (1) for a reward; grey when there is none."""
    if reward is None:
        return "#ddd"
    r = min(max(float(reward), 0.0), 1.0)
    return f"rgb({int(235 - 120 * r)},{int(150 + 85 * r)},{int(150 - 20 * r)})"


def section_groups(completions: list[dict]) -> str:
    head = '<section id="groups"><h2>Sampled groups</h2>'
    if not completions:
        return head + _missing("completions.jsonl") + "</section>"
    by_step: dict[int, list[dict]] = {}
    for c in completions:
        by_step.setdefault(c["step"], []).append(c)
    steps = sorted(by_step)
    if len(steps) > MAX_GROUP_STEPS:
        k = len(steps) - 1
        steps = sorted({steps[round(i * k / (MAX_GROUP_STEPS - 1))] for i in range(MAX_GROUP_STEPS)})
    parts = [
        "<p>Completions of each logged step's first round (whole groups, those with signal first), grouped by prompt: "
        "each cell is one completion, "
        "coloured by its reward (red 0, green 1), with its advantage (what pushed the policy up, +, or down, -). "
        f"{len(steps)} of {len(by_step)} logged steps.</p>"
    ]
    for i, step in enumerate(steps):
        rows = []
        for g in _by_prompt(by_step[step]):
            cells = "".join(
                f'<td style="background:{_colour(c.get("reward", _first_reward(c)))}">'
                f"<code>{_e(c['completion'])}</code><br><small>"
                + (f"A = {c['advantage']:+.2f}" if "advantage" in c else "")
                + "</small></td>"
                for c in g
            )
            gold = _e(g[0].get("answer", "?"))
            rows.append(f"<tr><th><code>{_e(g[0]['prompt'])}</code></th><td>{gold}</td>{cells}</tr>")
        is_open = " open" if i == len(steps) - 1 else ""
        parts.append(
            f"<details{is_open}><summary>step {step}</summary><table class=groups><tr><th>prompt</th><th>gold</th>"
            f"<th colspan=99>completions</th></tr>{''.join(rows)}</table></details>"
        )
    return head + "".join(parts) + "</section>"


def _by_prompt(rows: list[dict]) -> list[list[dict]]:
    """One step's logged completions, grouped: consecutive rows of the same group (runs that do not log the group:
    of the same prompt)."""
    groups: list[list[dict]] = []
    for c in rows:
        if groups and (groups[-1][0].get("group"), groups[-1][0]["prompt"]) == (c.get("group"), c["prompt"]):
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def _first_reward(c: dict):
    vals = [v for v in (c.get("rewards") or {}).values() if v is not None]
    return sum(vals) if vals else None


def _diverging(a: float, scale: float) -> str:
    """Blue for a positive advantage, red for a negative one, white for 0; full colour at |a| = scale."""
    t = min(abs(a) / scale, 1.0) if scale > 0 else 0.0
    end = (90, 140, 240) if a > 0 else (235, 90, 90)
    r, g, b = (round(255 + (e - 255) * t) for e in end)
    return f"rgb({r},{g},{b})"


def _token_text(t: str) -> str:
    """A token as shown in its cell: escaped, with a newline or tab made visible."""
    return _e(t).replace("\n", "\\n").replace("\t", "\\t")


def _token_title(p_old: float, p_new: float, ratio: float, entropy: float, adv: float) -> str:
    return (
        f"p_old {p_old:.4g}, p_new {p_new:.4g}, ratio {ratio:.4g}, entropy {entropy:.4g}, "
        f"advantage {adv:+.4g}"
    )


def _token_group(g: list[dict], scale: float) -> str:
    """One group: each completion a row of token cells (hover: the numbers), then the numbers as a table."""
    rows, numbers = [], []
    for j, c in enumerate(g, 1):
        reward = c.get("reward", _first_reward(c))
        cells, lines = [], []
        for t, *v in zip(c["tokens"], *(c[k] for k in TOKEN_NUMBERS), strict=True):
            adv, p_old, p_new, ratio, entropy = v
            title = _token_title(p_old, p_new, ratio, entropy, adv)
            cells.append(
                f'<span class=tok style="background:{_diverging(adv, scale)}" title="{_e(title)}">'
                f"{_token_text(t)}</span>"
            )
            lines.append(
                f"<tr><td>{j}</td><td><code>{_token_text(t)}</code></td><td>{adv:+.4g}</td><td>{p_old:.4g}</td>"
                f"<td>{p_new:.4g}</td><td>{ratio:.4g}</td><td>{entropy:.4g}</td></tr>"
            )
        shown = "none" if reward is None else f"{reward:g}"
        advantage = f"A = {c['advantage']:+.2f}" if "advantage" in c else ""
        rows.append(
            f'<tr><td>{j}</td><td style="background:{_colour(reward)}">reward {shown}</td><td>{advantage}</td>'
            f"<td class=toks>{''.join(cells)}</td></tr>"
        )
        numbers += lines
    gold = f" (gold {_e(g[0]['answer'])})" if "answer" in g[0] else ""
    head = "".join(f"<th>{h}</th>" for h in ("#", "token", "advantage", "p_old", "p_new", "ratio", "entropy"))
    return (
        f"<p>Prompt <code>{_e(g[0]['prompt'])}</code>{gold}</p><table class=tokens>{''.join(rows)}</table>"
        f"<details><summary>the numbers</summary><table><tr>{head}</tr>{''.join(numbers)}</table></details>"
    )


def section_tokens(completions: list[dict]) -> str:
    head = '<section id="tokens"><h2>Tokens</h2>'
    logged = [c for c in completions if "tokens" in c]
    if not logged:
        return (
            head
            + _missing("per-token probabilities in completions.jsonl: logged by runs of this version")
            + "</section>"
        )
    by_step: dict[int, list[dict]] = {}
    for c in logged:
        by_step.setdefault(c["step"], []).append(c)
    steps = sorted(by_step)[-MAX_TOKEN_STEPS:]
    parts = [
        "<p>Groups with signal (a mix of advantages) of the last logged steps, each completion drawn token by token. "
        "A token is coloured by the advantage the loss gave it: blue pushed its probability up, red down, white not "
        "at all (full colour at the step's largest |advantage|). Hover a token for its probability under the policy "
        "that sampled it (p_old) and under the policy after the step's update (p_new), their ratio (what the step "
        "did to it) and the updated policy's entropy at that position, at the run's temperature. In plain GRPO "
        "every token of a completion shares its advantage, so what differs between its tokens is the ratio and the "
        "entropy: where the step moved probability.</p>"
    ]
    for step in steps:
        rows = by_step[step]
        scale = max((abs(a) for c in rows for a in c.get("token_advantage", ())), default=0.0)
        signal = [g for g in _by_prompt(rows) if len({c.get("advantage") for c in g}) > 1]
        body = (
            "".join(_token_group(g, scale) for g in signal[:MAX_TOKEN_GROUPS])
            if signal
            else "<p>No logged group of this step has signal (each group's advantages are all equal).</p>"
        )
        is_open = " open" if step == steps[-1] else ""
        parts.append(
            f"<details{is_open}><summary>step {step}: {len(signal)} of {len(_by_prompt(rows))} logged groups with "
            f"signal (colour scale: |advantage| {scale:.3g})</summary>{body}</details>"
        )
    return head + "".join(parts) + "</section>"


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
            for p, a, c in fails
        )
        trend = ", ".join(
            f"{r['step']}: {len(r['failures'])}" for r in failures[:: max(1, len(failures) // 10)]
        )
        out.append(
            f"<p>Step {last['step']}: {len(fails)} wrong of {last['total']} (wrong by step: {_e(trend)}).</p>"
            + (
                f"<table><tr><th>prompt</th><th>gold</th><th>greedy completion</th></tr>{rows}</table>"
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
        out.append(_missing("no a+b problem kinds in the evaluation rows"))
    return "".join(out) + "</section>"


def section_beliefs(beliefs: list[dict]) -> str:
    head = '<section id="beliefs"><h2>Beliefs</h2>'
    if not beliefs:
        return (
            head
            + _missing("beliefs.jsonl: logged when the evaluation set is small, e.g. the seed bank")
            + "</section>"
        )
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


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1250px;color:#222}
h1{margin-bottom:0}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ddd;padding:.2em .5em;text-align:left}
pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap}img{max-width:100%}.missing{color:#a60}
table.groups td{min-width:4.5em;text-align:center}nav a{margin-right:1em}
.tok{font-family:monospace;font-size:110%;white-space:pre;padding:.1em .15em;margin:0 1px;border:1px solid #ddd}
"""


def build_report(run_dir: str | Path) -> str:
    """The report's HTML for a run directory."""
    run = Path(run_dir)
    config = _read_json(run / "config.json")
    metrics = read_log(run, "metrics.jsonl")
    completions = read_log(run, "completions.jsonl")
    parts = [
        section_run(run, config, metrics, read_log(run, "warnings.jsonl")),
        section_curves(metrics),
        section_groups(completions),
        section_tokens(completions),
        section_prompts(read_log(run, "prompt_stats.jsonl"), read_log(run, "eval_failures.jsonl"), metrics),
        section_beliefs(read_log(run, "beliefs.jsonl")),
    ]
    nav = "".join(
        f'<a href="#{s}">{s}</a>' for s in ("run", "curves", "groups", "tokens", "prompts", "beliefs")
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>tinygrpo report: {_e(run.name)}</title>"
        f"<style>{STYLE}</style></head><body><h1>tinygrpo run report</h1><nav>{nav}</nav>"
        + "".join(parts)
        + "</body></html>"
    )


def write_report(run_dir: str | Path) -> Path:
    """Write RUN_DIR/report.html and return its path (JsonlError on a log it cannot read, OSError naming report.html
    when it cannot be written)."""
    return _write(Path(run_dir), build_report(run_dir))


def _write(run: Path, text: str) -> Path:
    """Under a temporary name, then renamed: a reader never sees half a report (a WriteError, an OSError, names
    report.html, not the temporary file, which is removed)."""
    path = run / REPORT_FILE
    write_atomic(path, text)
    return path


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr if len(argv) != 1 else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    run = Path(argv[0])
    if not (run / "metrics.jsonl").is_file():
        return _error(f"{run} is not a run directory (no metrics.jsonl)")
    try:
        text = build_report(run)
    except JsonlError as e:
        return _error(str(e))
    except OSError as e:
        return _error(f"cannot read {e.filename or run}: {e.strerror or e}")
    except (KeyError, IndexError, TypeError, ValueError) as e:  # content the checks of LOGS let through
        return _error(f"cannot build a report from the logs in {run} ({type(e).__name__}: {e})")
    try:
        path = _write(run, text)
    except OSError as e:
        return _error(f"cannot write {e.filename}: {e.strerror or e}")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
