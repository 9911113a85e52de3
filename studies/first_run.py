"""README command 1 as a new user runs it: what it prints (the README's example output) and the top of the report it
writes (docs/report.png), from one run in a fresh clone of this checkout's commit.

    python -m studies.first_run                   # docs/results/first_run.json and docs/report.png
    python -m studies.first_run --screenshot ''   # the output only (no headless Chromium here)

The clone has no reference, so the run trains it first, as on a fresh machine; it runs with the installed packages
(command 1's `pip install` is not repeated). The README's block is drawn from the results file (`output`), so the
example output is what the command printed on the machine the file names.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .results import RESULTS, measurement, save

REPO = Path(__file__).resolve().parents[1]
COMMAND = "accelerate launch train_grpo.py"
SCREENSHOT = REPO / "docs" / "report.png"
WINDOW = "910,2030"  # the README's picture: the report's summary, settings and first curves


def printed_lines(raw: str) -> list[str]:
    """What a terminal shows of `raw`: a progress bar redraws its line with carriage returns, so only each line's
    last state stays; empty lines and trailing blanks go."""
    lines = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        shown = line.split("\r")[-1].rstrip()
        if shown:
            lines.append(shown)
    return lines


BAR = re.compile(r"^([^:\s]+): +\d+%\|")  # a progress bar's line: "grpo:  45%|████  | 450/1000 [...]"


def shortened(lines: list[str]) -> list[str]:
    """What a terminal would end up showing, shortened: a progress bar whose states came on lines of their own (a
    launcher that relays its child's output line by line) keeps its last state, and the SFT loss lines between the
    first and the last become one '...'."""
    kept: list[str] = []
    for line in lines:
        bar = BAR.match(line)
        if bar and kept and (last := BAR.match(kept[-1])) and last[1] == bar[1]:
            kept[-1] = line
        else:
            kept.append(line)
    sft = [i for i, line in enumerate(kept) if re.match(r"sft step\s+\d+", line)]
    if len(sft) <= 2:
        return kept
    return kept[: sft[0] + 1] + ["..."] + kept[sft[-1] :]


def run(clone: Path) -> tuple[str, float]:
    """Command 1 in `clone`: its combined stdout and stderr, and its wall seconds."""
    accelerate = Path(sys.executable).parent / "accelerate"
    start = time.perf_counter()
    done = subprocess.run(
        [str(accelerate), "launch", "train_grpo.py"],
        cwd=clone,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"error: {COMMAND} exited with {done.returncode}:\n{done.stdout[-3000:]}")
    return done.stdout, seconds


def screenshot(report: Path, dest: Path, browser: str) -> None:
    """The top of `report` (an html page from disk) as a PNG, by a headless Chromium."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
            + [f"--user-data-dir={profile}", f"--window-size={WINDOW}", f"--screenshot={dest}"]
            + [report.resolve().as_uri()],
            capture_output=True,
            timeout=120,
            check=True,
        )


def output(results: dict) -> str:
    """The README's example: what command 1 printed, shortened, and where."""
    m, v = results["measurement"]["machine"], results["measurement"].get("versions", {})
    minutes = results["seconds"] / 60
    torch = f", torch {v['torch']}" if "torch" in v else ""
    return (
        f"Every figure on this page was measured on one machine: {m['cpu']}, {m['cores']} cores, {m['kernels']} "
        f"kernels{torch}, one thread a run. What command 1 printed there after the installs ({minutes:.1f} minutes "
        "from a fresh clone; shortened):\n\n```text\n" + "\n".join(shortened(results["output"])) + "\n```"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS / "first_run.json")
    p.add_argument(
        "--screenshot",
        default=str(SCREENSHOT),
        help="where the report's picture goes ('' = none; it needs a headless chromium)",
    )
    args = p.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if args.screenshot and not browser:
        sys.exit("error: --screenshot needs a headless Chromium (chromium); none found. Pass --screenshot ''")
    with tempfile.TemporaryDirectory(prefix="first-run-") as tmp:
        clone = Path(tmp) / "tinygrpo"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        raw, seconds = run(clone)
        if args.screenshot:
            screenshot(clone / "runs" / "default" / "report.html", Path(args.screenshot), browser)
    results = {
        "measurement": measurement(COMMAND, threads=1, where="a fresh clone of the commit"),
        "seconds": round(seconds, 1),
        "output": printed_lines(raw),
    }
    print(f"wrote {save(args.results, results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
