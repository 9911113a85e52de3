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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
# The docs whose tables are rendered (the guides' reference tables, such as a list of options, are not results).
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]
MARKER = re.compile(
    r"^<!-- results (?P<fn>[\w.]+:\w+) (?P<data>\S+\.json) -->\n(?P<body>.*?)^<!-- /results -->$", re.M | re.S
)


# ------------------------------------------------------------------------------------------------ the files


def machine() -> dict[str, str]:
    """What a measurement ran on: the CPU's model and the kernels torch picked for it (AVX-512, AVX2, ...), the
    thread count; seconds and the last bits of every float depend on them."""
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
        "torch": torch.__version__,
        "kernels": torch.backends.cpu.get_cpu_capability(),
    }


def measurement(command: str, **extra: object) -> dict:
    """The `measurement` record of a results file: the command that measured it and where it ran."""
    return {"command": command, "machine": machine(), **extra}


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
    return {**old, rows: [by_name[n] for n in ranked]}


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
    return getattr(importlib.import_module(module), name)(load(data)).strip("\n")


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
