"""The report's first sections: the run (summary, warnings, settings, the command that reproduces it) and its curves."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from tinygrpo.run.report.curves import CURVES_DPI, curves_figure
from tinygrpo.run.report.html import NO_FIGURE, _e, _pct, _png


def reproduce_command(config: dict) -> str:
    """`accelerate launch train_grpo.py` with the settings that differ from today's defaults (every setting the
    config holds that this version does not know is passed as it is)."""
    from dataclasses import asdict

    from tinygrpo.run.config import GRPOConfig

    defaults = asdict(GRPOConfig())  # (as resolved: max_steps is 1000 when no option gives the run's length)
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


def forecast_text(forecast: dict, steps: list[dict], first: int = 20) -> str:
    """The forecast share of groups with signal and pass@G, beside the share measured on the first steps logged
    (1 - frac_reward_zero_std, the first round's groups: what the forecast estimates)."""
    G = next((k.removeprefix("forecast/pass@") for k in forecast if k.startswith("forecast/pass@")), "G")
    text = (
        f"{_pct(forecast['forecast/frac_groups_with_signal'])} of groups with signal, pass@{G} "
        f"{_pct(forecast.get(f'forecast/pass@{G}'))} ({int(forecast.get('forecast/prompts', 0))} training prompts)"
    )
    early = [
        1 - r["frac_reward_zero_std"]
        for r in steps
        if r.get("step", 0) <= first and "frac_reward_zero_std" in r
    ]
    if early:
        text += f"; measured in the steps logged up to step {first}: {_pct(sum(early) / len(early))}"
    return text


def section_run(
    run: Path, config: dict, metrics: list[dict], warnings: list[dict] = (), unrecorded: Sequence[str] = ()
) -> str:
    """The summary, the warnings (a row saying there were none), what the run did not record (the sections it would
    have filled are left out), the settings and the command that reproduces the run."""
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
    signal = [r for r in steps if "frac_completions_with_signal" in r]
    if (
        signal
    ):  # (over the run: the share the sampling rules spend their samples on, docs/sample_efficiency.md)
        rows += [
            (
                "samples with signal (frac_completions_with_signal), mean of the logged steps",
                _pct(sum(r["frac_completions_with_signal"] for r in signal) / len(signal)),
            ),
            (
                "groups with zero reward variance (frac_reward_zero_std), mean of the logged steps",
                _pct(sum(r["frac_reward_zero_std"] for r in signal) / len(signal)),
            ),
        ]
    forecast = next((r for r in metrics if "forecast/frac_groups_with_signal" in r), None)
    if forecast is not None:
        rows.append(("signal forecast (before step 1)", forecast_text(forecast, steps)))
    rows += [(f"step {w['step']}", w["warning"]) for w in warnings]  # what the run said it could not learn
    if not warnings:
        rows.append(("warnings", "none: the run warned about nothing"))
    if unrecorded:
        rows.append(("not recorded in this run", "; ".join(unrecorded)))
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    settings = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in sorted(config.items()))
    cmd = reproduce_command(config) if config else "(no config.json)"
    return (
        f'<section id="run"><h2>The run</h2><p>{_e(run)}</p><table>{table}</table>'
        f"<p>Reproduce it (from the repository root):</p><pre>{_e(cmd)}</pre>"
        f"<details><summary>All settings</summary><table>{settings}</table></details></section>"
    )


def has_curves(metrics: list[dict]) -> bool:
    """Whether metrics.jsonl holds a step or an evaluation to draw."""
    return any("reward" in r or "eval/accuracy" in r for r in metrics)


def section_curves(metrics: list[dict], figures: bool = True) -> str:
    """'' with nothing to draw (the run section says so)."""
    if not has_curves(metrics):
        return ""
    if not figures:
        return f'<section id="curves"><h2>Curves</h2>{NO_FIGURE}</section>'
    # plots.png's figure (metrics_io.plot_metrics), at its resolution: the same picture in both places
    return f'<section id="curves"><h2>Curves</h2>{_png(curves_figure(metrics), dpi=CURVES_DPI)}</section>'
