"""The default experiment over seeds and kernel paths: what README command 1 gives, and how much that moves.

    python -m studies.default                      # seeds 42, 1, 2, then seed 42 on the lower kernel path
    python -m studies.default --summarize          # docs/results/default.json from the runs already there

Each run is README command 1's experiment (`train_grpo.py` with its defaults: the SFT reference, then GRPO) at one
thread, one run at a time, evaluated on the test split every 5 steps (an evaluation changes nothing about training,
and its seconds are off the clock). "Time to X %" is, here and wherever the docs quote it, the training seconds at
the first evaluation on the test split at or above X, evaluated every 5 steps; over seeds, the median.

GRPO on another CPU acts as another seed: torch's x86 builds pick ATen's, MKL's and oneDNN's kernels by instruction
set, each summing in its own order, and a run is bit-identical only on the same kind of CPU at the same thread count.
The reference does not move (it trains on portable kernels, SFTConfig.kernels). The last run repeats seed 42 with
lower kernels (ATEN_CPU_CAPABILITY=default, MKL_ENABLE_INSTRUCTIONS=SSE4_2, ONEDNN_MAX_CPU_ISA=SSE41), its reference
trained again from there: what a machine with other kernels would see.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from ._runs import ENV, REPO, first_at, log_path, read_metrics
from .results import RESULTS, markdown, measurement, median, pct, save

LOWER = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
THRESHOLDS = (0.90, 0.95, 0.98, 0.99)
EVAL_STEPS = 5


def run(out: Path, seed: int, lower: bool) -> int:
    """The reference (for the lower path, trained again on it) and one GRPO run; output beside the directory."""
    env = {**os.environ, **ENV, **(LOWER if lower else {})}
    reference = REPO / "checkpoints" / "reference" if not lower else out.parent / "reference_lower"
    cmds = []
    if not (reference / "config.json").is_file():
        cmds.append([sys.executable, "train_sft.py", "--output_dir", str(reference)])
    cmds.append(
        [sys.executable, "train_grpo.py", "--seed", str(seed), "--eval_steps", str(EVAL_STEPS)]
        + ["--model_name_or_path", str(reference), "--output_dir", str(out), "--overwrite_output_dir", "true"]
        + ["--torch_num_threads", "1", "--disable_tqdm", "true", "--save_steps", "0"]
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path(out), "w") as f:
        for cmd in cmds:
            code = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
            if code:
                return code
    return 0


def summarize(runs: list[tuple[int, bool, Path]], command: str) -> dict:
    """Per run: the reference's test accuracy, the final one, and the seconds and completions at the first
    evaluation at or above each threshold (None: never)."""
    rows = []
    for seed, lower, d in runs:
        if not (d / "summary.json").is_file():
            continue
        summary = json.loads((d / "summary.json").read_text())
        curve = [
            [r["step"], r.get("time/elapsed", 0.0), r.get("num_completions", 0), r["eval/accuracy"]]
            for r in read_metrics(d)
            if "eval/accuracy" in r
        ]
        rows.append(
            {
                "seed": seed,
                "kernels": "lower" if lower else "default",
                "reference": summary["eval_before"]["eval/accuracy"],
                "final": summary["eval_after"]["eval/accuracy"],
                "seconds": {f"{t:.2f}": first_at(curve, t, 1) for t in THRESHOLDS},
                "completions": {f"{t:.2f}": first_at(curve, t, 2) for t in THRESHOLDS},
                "training_seconds": curve[-1][1],
                "num_completions": summary["num_completions"],
            }
        )
    return {
        "measurement": measurement(command, threads=1, side_by_side=1, eval_steps=EVAL_STEPS, lower=LOWER),
        "runs": rows,
    }


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def table(results: dict) -> str:
    """Every run: reference, final, seconds to 90 / 95 / 98 / 99 %, on the test split."""
    head = ["seed", "kernels", "reference", "after GRPO", *(f"s to {pct(t, 0, True)}" for t in THRESHOLDS)]
    head += ["training s"]
    rows = [
        [str(r["seed"]), r["kernels"], pct(r["reference"]), pct(r["final"])]
        + [_s(r["seconds"][f"{t:.2f}"]) for t in THRESHOLDS]
        + [f"{r['training_seconds']:.1f}"]
        for r in results["runs"]
    ]
    return markdown(head, rows)


def headline(results: dict) -> str:
    """The README's rows: the medians over the runs on this machine's kernels, and the lower-kernel run beside."""
    default = [r for r in results["runs"] if r["kernels"] == "default"]
    lower = [r for r in results["runs"] if r["kernels"] == "lower"]
    # (the README names its one machine once, above the table: tests/test_results.py checks they are one)

    def times(rs: list[dict]) -> str:
        cells = []
        for t in THRESHOLDS:
            got = [r["seconds"][f"{t:.2f}"] for r in rs if r["seconds"][f"{t:.2f}"] is not None]
            cells.append(f"{median(got):.0f} s" if len(got) * 2 > len(rs) else "-")
        return " / ".join(cells)

    rows = [
        [
            f"median of {len(default)} seeds ({', '.join(str(r['seed']) for r in default)})",
            pct(median([r["reference"] for r in default])),
            f"**{pct(median([r['final'] for r in default]))}** ({' / '.join(pct(r['final']) for r in default)})",
            times(default),
        ]
    ]
    rows += [
        [f"seed {r['seed']}, lower kernels", pct(r["reference"]), pct(r["final"]), times([r])] for r in lower
    ]
    head = ["the default experiment", "reference", "after GRPO", "s to 90 / 95 / 98 / 99 %"]
    return markdown(head, rows) + "\n\n(Test split; one thread; a median is shown where most runs got there.)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[42, 1, 2])
    p.add_argument("--lower_seeds", nargs="*", type=int, default=[42], help="seeds run on the lower kernels")
    p.add_argument("--output_dir", type=Path, default=REPO / "runs" / "default")
    p.add_argument("--summarize", action="store_true", help="only summarize the runs already there")
    p.add_argument("--results", type=Path, default=RESULTS / "default.json")
    args = p.parse_args(argv)
    runs = [(s, False, args.output_dir / f"seed{s}") for s in args.seeds]
    runs += [(s, True, args.output_dir / f"lower-seed{s}") for s in args.lower_seeds]
    if not args.summarize:
        for seed, lower, d in runs:  # one at a time: their seconds are reported
            print(f"seed {seed}{' (lower kernels)' if lower else ''}: {d}", flush=True)
            if run(d, seed, lower):
                print(f"failed: see {log_path(d)}", file=sys.stderr)
    command = "python -m studies.default --seeds " + " ".join(map(str, args.seeds))
    command += " --lower_seeds " + " ".join(map(str, args.lower_seeds))
    results = summarize(runs, command)
    save(args.results, results)
    print(table(results))
    print(f"wrote {args.results}; python -m studies.results renders the docs' tables from it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
