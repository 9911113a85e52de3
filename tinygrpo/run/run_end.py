"""The end of a run: the files it leaves (final/, plots.png, report.html, summary.json) or, stopped early, its
checkpoint, report and how to resume; and, when a second Ctrl-C cuts these writes short, which are missing and how to
make them. The trainer calls `write_run_end` with the signal handler still installed (a SIGTERM after the last step
lets them finish)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch.nn as nn

from tinygrpo.data.writes import save_model_files, write_atomic
from tinygrpo.run import checkpoint as ckpt
from tinygrpo.run.metrics_io import plot_metrics
from tinygrpo.run.report import write_report
from tinygrpo.update.policy_update import NonFiniteError


def write_run_end(
    out: Path,
    *,
    finished: bool,
    step: int,
    save_checkpoint: Callable[[], Path],
    model: nn.Module,
    tokenizer,
    summary: dict,
    is_main: bool,
    make_plots: bool,
    make_report: bool,
    signal_name: str,
) -> None:
    """The last checkpoint (every process), then (main process) the end-of-run files of a run that reached its
    last step; a run stopped earlier writes its report and raises KeyboardInterrupt saying how to resume."""
    try:
        save_checkpoint()
        if not finished:
            if make_report and is_main:
                write_report(out, figures=make_plots)
            raise KeyboardInterrupt(
                f"{signal_name}: stopped after step {step}; checkpoint saved in {out}. Resume with the same command "
                "plus --resume_from_checkpoint latest"
            )
        if is_main:
            save_model_files(out / "final", [model, tokenizer])
            if make_plots:
                plot_metrics(out / "metrics.jsonl", out / "plots.png")
            if make_report:
                write_report(out, figures=make_plots)
            write_atomic(out / "summary.json", json.dumps(summary, indent=2))
    except KeyboardInterrupt as e:
        if str(e):
            raise
        wanted = ["final/", *(["plots.png"] if make_plots else []), "report.html", "summary.json"]
        missing = [f for f in wanted if not (out / f.rstrip("/")).exists()]
        raise KeyboardInterrupt(
            f"interrupted during the end-of-run writes: {', '.join(missing) or 'nothing'} not written; "
            f"{ckpt.last_checkpoint(out, resume=True)}; `python -m tinygrpo.run.report {out}` writes the report from "
            "the run's logs"
        ) from None


def say_skipped_steps(skipped: int, steps: int, out: Path, say: Callable[[str], None]) -> None:
    """At the end of a run with on_nonfinite=skip: every step skipped is an error (the weights are still the ones the
    run started with: nothing is saved); some skipped are said."""
    if skipped and skipped == steps:
        raise NonFiniteError(
            f"on_nonfinite=skip skipped every one of the {skipped} steps (each had a NaN or infinite loss or "
            f"gradient): the run learned nothing ({ckpt.last_checkpoint(out, resume=True)})"
        )
    if skipped:
        say(
            f"on_nonfinite=skip: {skipped} of {steps} steps were skipped (a NaN or infinite loss or gradient)"
        )
