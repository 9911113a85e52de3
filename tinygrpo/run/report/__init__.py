"""report.html: one self-contained page of what a run did, from its output directory alone.

    python -m tinygrpo.run.report RUN_DIR            # any run: finished, interrupted or in progress, of this or older code

The trainer writes it at the end of every run. It reads only the run directory's files (config.json, metrics.jsonl,
completions.jsonl and, where the run wrote them, prompt_stats.jsonl, eval_failures.jsonl, beliefs.jsonl,
warnings.jsonl); its run section names the logs a section needed and did not find (an interrupted run, an older
version's); a log it cannot read is one `error:` line naming the file and the line (exit code 1). Figures are PNGs
drawn with matplotlib and inlined as data URIs; there is no script, no stylesheet to fetch, no network: the file
opens from disk and can be attached to an issue.

Its modules: run.py (the run section and the curves), curves.py (the curves figure, plots.png's too), groups.py (the
sampled groups and their tokens), prompts.py (the prompts and the beliefs), logs.py (the logs it reads), html.py (the
page's HTML and style), __main__.py (the command line).

Sections, each only where it has something to show (and its link at the top with it): the run (summary, the warnings
or a row saying there were none, what was not recorded, settings, the command that reproduces it); curves (plots.png's
figure: reward, held-out accuracy by step, by problem kind, against seconds and against completions, signal, KL or
entropy, prompts by their latest group, lengths; a curve of fewer than three points is drawn as markers alone);
sampled groups (the logged completions of each logged step, coloured by reward, with advantages and gold answers);
tokens (the groups with signal of the last logged steps drawn token by token, each token coloured by its advantage,
with its probability before and after the step's update, their ratio and the entropy on hover and in a table);
prompts (pass-rate estimates of the training prompts over time, then the prompts by their latest group in the curves'
words and numbers; the first held-out failures at the end and a count of the rest; accuracy by problem kind); beliefs
(on a small problem set: the policy's probability of each answer for each question at the first, middle and last
evaluation).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tinygrpo.base.files import write_atomic
from tinygrpo.run.logs import JsonlError
from tinygrpo.run.report.groups import section_groups, section_tokens
from tinygrpo.run.report.html import STYLE, _e
from tinygrpo.run.report.logs import LOGS, REPORT_FILE, _read_json, read_log
from tinygrpo.run.report.prompts import section_beliefs, section_prompts
from tinygrpo.run.report.run import has_curves, section_curves, section_run

__all__ = ["LOGS", "REPORT_FILE", "build_report", "main", "read_log", "unrecorded", "write_report"]


def unrecorded(
    metrics: list[dict], completions: list[dict], stats: list[dict], failures: list[dict]
) -> list[str]:
    """What the run did not log, each with the part of the page it would have filled: that part is left out, and
    the run section says why (an interrupted run, or one of an older version)."""
    missing = [
        (not has_curves(metrics), "a step or an evaluation in metrics.jsonl (the curves)"),
        (not completions, "completions.jsonl (the sampled groups and their tokens)"),
        (
            bool(completions) and not any("tokens" in c for c in completions),
            "per-token probabilities in completions.jsonl, logged by runs of this version (the tokens)",
        ),
        (
            not stats,
            "prompt_stats.jsonl, written by runs of this version with an evaluation split (pass rates)",
        ),
        (not failures, "eval_failures.jsonl (the held-out failures)"),
    ]
    return [what for absent, what in missing if absent]


def build_report(run_dir: str | Path, figures: bool = True) -> str:
    """The report's HTML for a run directory: the sections with something to show, each linked from the top.
    `figures` False: a line in place of each figure (a run's make_plots false)."""
    run = Path(run_dir)
    config = _read_json(run / "config.json")
    metrics = read_log(run, "metrics.jsonl")
    completions = read_log(run, "completions.jsonl")
    stats, failures = read_log(run, "prompt_stats.jsonl"), read_log(run, "eval_failures.jsonl")
    parts = {
        "run": section_run(
            run,
            config,
            metrics,
            read_log(run, "warnings.jsonl"),
            unrecorded(metrics, completions, stats, failures),
        ),
        "curves": section_curves(metrics, figures),
        "groups": section_groups(completions),
        "tokens": section_tokens(completions),
        "prompts": section_prompts(stats, failures, metrics, figures),
        "beliefs": section_beliefs(read_log(run, "beliefs.jsonl"), figures),
    }
    # a section with nothing to show is left out, and so is its link
    parts = {name: part for name, part in parts.items() if part}
    nav = "".join(f'<a href="#{name}">{name}</a>' for name in parts)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>tinygrpo report: {_e(run.name)}</title>"
        f"<style>{STYLE}</style></head><body><h1>tinygrpo run report</h1><nav>{nav}</nav>"
        + "".join(parts.values())
        + "</body></html>"
    )


def write_report(run_dir: str | Path, figures: bool = True) -> Path:
    """Write RUN_DIR/report.html and return its path (JsonlError on a log it cannot read, OSError naming report.html
    when it cannot be written)."""
    return _write(Path(run_dir), build_report(run_dir, figures))


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
