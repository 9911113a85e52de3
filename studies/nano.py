"""nano_grpo.py measured: held-out accuracy and seconds of `python nano_grpo.py`, over seeds.

    python -m studies.nano --split validation --max_steps 300 400 500 --seeds 42   # the choice of max_steps
    python -m studies.nano                                                          # the default, test split, 3 seeds

Each run is `python nano_grpo.py --eval_split SPLIT --max_steps N --seed S` as a process of its own, one at a time
(torch's default threads: what a user gets), its printed lines read back. The choice of max_steps is made on the
validation split, by a rule set before the runs: the fewest of the steps tried whose last evaluation is at least
90 % (nano_grpo.py's default); the test split is reported once, with that default. Results go to docs/results/nano.json, whose
table the README shows.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time

from studies.results import REPO, RESULTS, load, markdown, measurement, median, now, pct, save

LINE = re.compile(r"^step (\d+): (?:reward [\d.]+, )?held-out accuracy ([\d.]+)%")


def run(split: str, steps: int, seed: int) -> dict:
    """One run of nano_grpo.py: its accuracy at each evaluation, the seconds the whole command took."""
    cmd = [
        sys.executable,
        "nano_grpo.py",
        "--eval_split",
        split,
        "--max_steps",
        str(steps),
        "--seed",
        str(seed),
    ]
    start = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if p.returncode:
        raise SystemExit(f"error: {shlex.join(cmd[1:])} failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    curve = [[int(m[1]), float(m[2]) / 100] for line in p.stdout.splitlines() if (m := LINE.match(line))]
    if not curve or curve[0][0] != 0 or curve[-1][0] != steps:
        raise SystemExit(
            f"error: nano_grpo.py printed no accuracy at steps 0 and {steps}:\n{p.stdout[-2000:]}"
        )
    command = shlex.join(["python", *cmd[1:]])
    return {
        "date": now(),
        "split": split,
        "max_steps": steps,
        "seed": seed,
        "seconds": round(seconds, 1),
        "curve": curve,
        "command": command,
    }


def summarize(runs: list[dict], command: str) -> dict:
    return {"measurement": measurement(command), "runs": runs}


def table(results: dict) -> str:
    """One row per (split, max_steps): the reference's and the final accuracy (median and each seed), seconds."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in results["runs"]:
        groups.setdefault((r["split"], r["max_steps"]), []).append(r)
    rows = []
    for (split, steps), runs in groups.items():
        first, last = [r["curve"][0][1] for r in runs], [r["curve"][-1][1] for r in runs]
        seeds = ("seeds " if len(runs) > 1 else "seed ") + ", ".join(str(r["seed"]) for r in runs)
        each = " / ".join(pct(x) for x in last)
        final = f"**{pct(median(last))}**" + (f" ({each})" if len(runs) > 1 else "")
        rows.append(
            [
                f"{split}, {seeds}",
                str(steps),
                pct(median(first)),
                final,
                f"{median([r['seconds'] for r in runs]):.0f} s",
            ]
        )
    note = "\n\n(Medians; the whole command's seconds, model loading included; the README's machine.)"
    return markdown(["`python nano_grpo.py`", "max_steps", "reference", "after GRPO", "seconds"], rows) + note


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="test", choices=["validation", "test"])
    p.add_argument("--max_steps", type=int, nargs="+", default=[300])
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2])
    p.add_argument("--results", default=str(RESULTS / "nano.json"), help="'' to write nothing")
    args = p.parse_args(argv)
    command = shlex.join(["python", "-m", "studies.nano", *(sys.argv[1:] if argv is None else argv)])
    runs = []
    for steps in args.max_steps:
        for seed in args.seeds:
            print(
                f"nano_grpo.py --eval_split {args.split} --max_steps {steps} --seed {seed} ...",
                file=sys.stderr,
            )
            runs.append(run(args.split, steps, seed))
            c = runs[-1]["curve"]
            print(f"  {pct(c[0][1])} -> {pct(c[-1][1])} in {runs[-1]['seconds']:.0f} s", file=sys.stderr)
    if args.results:
        path = args.results
        try:
            before = load(path)
            old, commands = before["runs"], before["measurement"]["command"].split("; ")
        except (OSError, KeyError, ValueError):
            old, commands = [], []
        mine = {(r["split"], r["max_steps"], r["seed"]) for r in runs}
        kept = [r for r in old if (r["split"], r["max_steps"], r["seed"]) not in mine]
        # (each study command that measured rows kept: the screen's and the report's)
        commands = [c for c in commands if any(r["split"] in c or "--split" not in c for r in kept)] + [
            command
        ]
        results = summarize(kept + runs, "; ".join(dict.fromkeys(commands)))
        if (
            any("date" not in r for r in kept) and "caveat" in before["measurement"]
        ):  # (rows of an earlier record)
            results["measurement"]["caveat"] = before["measurement"]["caveat"]
        save(path, results)
        print(f"wrote {path}; python -m studies.results draws the README's table from it", file=sys.stderr)
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
