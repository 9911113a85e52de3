"""Does the default reference move with the CPU's kernels? README command 1's reference (`python train_sft.py`),
trained on the portable kernels (its default, SFTConfig.kernels) and on the process's own (--kernels native), each
from a process on this CPU's kernels and from one on the lower path, one run at a time.

    python -m studies.reference_kernels          # docs/results/reference_kernels.json, docs/default.md's table

The lower path is .ci/run's (ATEN_CPU_CAPABILITY=default, MKL_ENABLE_INSTRUCTIONS=SSE4_2, ONEDNN_MAX_CPU_ISA=SSE41):
what a CPU with other kernels gives. Same weights are the same file bytes (their sha256).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ._runs import ENV, REPO
from .default import LOWER
from .results import RESULTS, markdown, measurement, pct, save

KERNELS = ("portable", "native")
PATHS = ("this CPU's", "lower")


def train(out: Path, kernels: str, lower: bool) -> dict:
    """One reference: its summary (held-out accuracy, final loss, seconds) and its weights' sha256."""
    env = {**os.environ, **ENV, **(LOWER if lower else {})}
    cmd = [
        sys.executable,
        "train_sft.py",
        "--output_dir",
        str(out),
        "--kernels",
        kernels,
        "--logging_steps",
        "0",
    ]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"error: {' '.join(cmd)} exited with {done.returncode}: {done.stderr[-2000:]}")
    summary = json.loads((out / "sft_summary.json").read_text())
    return {
        "kernels": kernels,
        "started_on": PATHS[lower],
        "trained_on": summary["kernels"],
        "eval_accuracy": summary["eval_accuracy"],
        "final_loss": summary["final_loss"],
        "train_seconds": summary["train_seconds"],
        "sha256": hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest(),
    }


def table(results: dict) -> str:
    """One row per reference: where its process started, the kernels it trained on, what it became."""
    first: dict[str, str] = {}
    rows = []
    for r in results["runs"]:
        if r["kernels"] not in first:
            first[r["kernels"]], verdict = r["sha256"], "-"
        else:
            verdict = "the same weights" if first[r["kernels"]] == r["sha256"] else "other weights"
        rows.append(
            [
                f"`--kernels {r['kernels']}`",
                r["started_on"],
                r["trained_on"],
                pct(r["eval_accuracy"]),
                f"{r['final_loss']:.4f}",
                f"{r['train_seconds']:.1f}",
                verdict,
            ]
        )
    m = results["measurement"]["machine"]
    head = [
        "reference",
        "process started on",
        "trained on",
        "held out",
        "last loss",
        "seconds",
        "as the first",
    ]
    return (
        markdown(head, rows)
        + f"\n\n(`python -m studies.reference_kernels`; {m['cpu']}, {m['kernels']} kernels, one thread; the last "
        "column compares the weights' bytes with the first row of the same --kernels; held-out greedy accuracy on the "
        "test split.)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=RESULTS / "reference_kernels.json")
    args = p.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="reference-kernels-") as tmp:
        for kernels in KERNELS:
            for lower in (False, True):  # one at a time: their seconds are reported
                print(f"--kernels {kernels}, started on {PATHS[lower]} kernels", flush=True)
                runs.append(train(Path(tmp) / f"{kernels}-{int(lower)}", kernels, lower))
    results = {"measurement": measurement("python -m studies.reference_kernels", threads=1), "runs": runs}
    save(args.results, results)
    print(table(results))
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
