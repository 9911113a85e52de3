"""One source for every number: a study's or a benchmark's results in a small committed file, its tables rendered
from that file alone.

A study (or benchmark) writes what it measured to `docs/results/<name>.json`: numbers, per seed where it ran
several, with the command that measured them and the machine it ran on (`measurement`). Its tables (or a whole
generated page, prose and tables) are functions of that file, and sit in a doc (or the README) between markers
that name the function:

    <!-- results studies.tasks:table docs/results/tasks.json -->
    | task | ... |
    <!-- /results -->

`python -m studies.results` renders every marked table of every doc again from its results file and writes it in
place; `tests/test_results.py` renders them and compares them with the committed docs (a table cannot drift from
its data), and checks that no results table of a doc sits outside markers. A figure a study draws is drawn from the
same file.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
# The docs whose tables are rendered (the guides' reference tables, such as a list of options, are not results).
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
MARKER = re.compile(
    r"^<!-- results (?P<fn>[\w.]+:\w+) (?P<data>\S+\.json) -->\n(?P<body>.*?)^<!-- /results -->$", re.M | re.S
)


# ------------------------------------------------------------------------------------------------ the files


def machine(threads: int | None = None) -> dict[str, str]:
    """What a measurement ran on: the CPU's model, its cores, the torch threads a run used (`threads`, or this
    process's), the kernels torch picked for the CPU (AVX-512, AVX2, ...) and the accelerator if any; seconds and the
    last bits of every float depend on them."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "cpu": cpu or "unknown",
        "cores": str(os.cpu_count()),
        "threads": str(threads if threads is not None else torch.get_num_threads()),
        "kernels": torch.backends.cpu.get_cpu_capability(),
        "accelerator": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }


# The packages whose versions a results file records ("not installed" where one is missing: trl is a peer only).
PACKAGES = ("torch", "transformers", "datasets", "accelerate", "trl")


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def commit() -> str:
    """The repository's commit, with '+changes' when tracked files outside docs/ differ from it (a study writes its
    results into docs/ while it runs); 'unknown' outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout

    try:
        sha = git("rev-parse", "HEAD").strip()
        changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+changes" if any(not c.startswith("docs/") for c in changed) else "")


# What a results file's `measurement` records when its run wrote it (tests/test_results.py checks every file).
RECORDED = ("command", "machine", "versions", "commit", "date")
MACHINE = ("cpu", "cores", "threads", "kernels", "accelerator")


def now() -> str:
    """The date and time a result is recorded at, UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def measurement(command: str, threads: int | None = None, **extra: object) -> dict:
    """The `measurement` record of a results file: the command that measured it, the machine it ran on (`threads`:
    the torch threads each run used), the packages' versions, the commit and the date (UTC)."""

    return {
        "command": command,
        "machine": machine(threads),
        "versions": versions(),
        "commit": commit(),
        "date": now(),
        **({"threads": threads} if threads is not None else {}),
        **extra,
    }


def caveat(results: dict) -> str | None:
    """What a results file says it lacks (`measurement.caveat`: transcribed from an earlier run's printed tables,
    or written before results files recorded versions, commit and date), or None for a file its run wrote whole."""
    return results.get("measurement", {}).get("caveat")


def missing_record(results: dict) -> list[str]:
    """The fields of RECORDED (and of the machine) that a results file's measurement lacks."""
    m = results.get("measurement", {})
    missing = [k for k in RECORDED if not m.get(k)]
    return missing + [f"machine.{k}" for k in MACHINE if "machine" not in missing and not m["machine"].get(k)]


def caveat_line(results: dict) -> str:
    """The line a table drawn from a file with a caveat shows under it ('' for a file its run wrote whole)."""
    c = caveat(results)
    return f"\n\n*(Not rerun: {c}.)*" if c else ""


def save(path: Path, results: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    return path


def merged(old: dict | None, new: dict, order: Sequence[str], rows: str = "tasks", key: str = "task") -> dict:
    """A study run on some tasks (arms) updates their rows of its results file (`rows`, each named by `key`) and
    keeps the others' and the file's other fields; the rows in `order`, then any other. Each new row should carry
    where it was measured."""
    if not old:
        return new
    by_name = {r[key]: r for r in old[rows]}
    by_name.update({r[key]: r for r in new[rows]})
    ranked = [n for n in order if n in by_name] + [n for n in by_name if n not in order]
    out = {**old, rows: [by_name[n] for n in ranked]}
    mine = {r[key] for r in new[rows]}
    if "measurement" in new and all(r[key] in mine for r in old[rows]):  # every row is the new run's now
        out["measurement"] = new["measurement"]
    return out


def load(path: str | Path) -> dict:
    p = Path(path)
    return json.loads((p if p.is_absolute() else REPO / p).read_text())


# ------------------------------------------------------------------------------------------------ formatting


def markdown(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def pct(x: float | None, digits: int = 1, space: bool = False) -> str:
    """0.731 -> '73.1%' ('73.1 %' with space); None -> '-'."""
    if x is None:
        return "-"
    return f"{100 * x:.{digits}f}{' ' if space else ''}%"


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def each(xs: Sequence[float], fmt: Callable[[float], str] = pct, sep: str = " / ") -> str:
    return sep.join(fmt(x) for x in xs)


# ------------------------------------------------------------------------------------------------ the docs


def shown(path: Path) -> str:
    """A results file as a marker names it: from the repository root when it is inside, else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def block(fn: str, data: Path) -> str:
    """A marked block: what `fn` draws from the results file `data`, between the markers that name them."""
    return f"<!-- results {fn} {shown(data)} -->\n{render(fn, shown(data))}\n<!-- /results -->"


def write_page(path: Path, fn: str, data: Path) -> Path:
    """A page a study generates whole: one marked block (so that tests/test_results.py checks it too)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(block(fn, data) + "\n")
    return Path(path)


def render(fn: str, data: str) -> str:
    """The table `fn` ('module:function') draws from the results file `data`."""
    module, name = fn.split(":")
    results = load(data)
    # A file that is not its run's whole record says so under every table drawn from it, whatever draws it.
    return (getattr(importlib.import_module(module), name)(results).strip("\n") + caveat_line(results)).strip(
        "\n"
    )


def rendered(text: str) -> str:
    """`text` with every marked table rendered again from its results file."""

    def again(m: re.Match) -> str:
        return f"<!-- results {m['fn']} {m['data']} -->\n{render(m['fn'], m['data'])}\n<!-- /results -->"

    return MARKER.sub(again, text)


def unmarked_tables(text: str) -> list[str]:
    """The first line of each markdown table of `text` outside markers."""
    outside = MARKER.sub("", text)
    found, previous = [], ""
    for line in outside.splitlines():
        if line.startswith("|") and not previous.startswith("|"):
            found.append(line)
        previous = line
    return found


def write_docs(paths: Iterable[Path] = DOCS) -> list[Path]:
    """Render every marked table of the docs in place; the docs that changed."""
    changed = []
    for path in paths:
        text = path.read_text()
        new = rendered(text)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.parse_args(argv)
    for path in write_docs():
        print(f"rewrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
