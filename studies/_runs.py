"""What the studies share: one `train_grpo.py` run in a subprocess, its evaluation curve, when it first reached an
accuracy, its final policy's test accuracy, and numbers over seeds as mean ± std.

Every study run is the same command line (one thread, trained on `train_without_validation`, evaluated on
`validation`, no checkpoints but the final policy) with the study's own flags after it, so that a study's numbers
differ from another's only by those flags.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# One thread per run: two single-threaded runs on two cores are faster than one run on two threads, and their
# seconds stay comparable (intra-op threads on a shared machine oversubscribe it).
ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
THREADS = "one thread per run (OMP_NUM_THREADS=1, --torch_num_threads 1)"


def train_command(out: Path, seed: int, eval_steps: int, model: str, flags: list[str]) -> list[str]:
    """train_grpo.py's argv for one study run; `flags` come last, so they override the common ones."""
    return [
        sys.executable,
        str(REPO / "train_grpo.py"),
        *"--dataset_train_split train_without_validation --dataset_test_split validation".split(),
        *f"--seed {seed} --eval_steps {eval_steps} --logging_steps 5".split(),
        *"--torch_num_threads 1 --disable_tqdm true --make_plots false --save_steps 0".split(),
        *"--overwrite_output_dir true --output_dir".split(),
        str(out),
        "--model_name_or_path",
        model,
        *flags,
    ]


def add_output_and_jobs(p: argparse.ArgumentParser, out: Path | None) -> None:
    """--output_dir (where the runs go; --out still accepted) and --jobs (runs side by side; --parallel still
    accepted), as args.out and args.parallel (`out` None: the study picks it after parsing)."""
    p.add_argument("--output_dir", "--out", dest="out", type=Path, default=out)
    p.add_argument(
        "--jobs",
        "--parallel",
        dest="parallel",
        type=int,
        default=2,
        help="runs side by side (one thread each; default 2)",
    )


def log_path(out: Path) -> Path:
    """Where a run's stdout and stderr go: beside its directory (a failed run may not have made it)."""
    return out.parent / f"{out.name}.log"


def train(out: Path, seed: int, eval_steps: int, model: str, flags: list[str]) -> int:
    """Run train_grpo.py to the end, its output in log_path(out); the exit status."""
    return run_logged(train_command(out, seed, eval_steps, model, flags), out)


def run_logged(cmd: list[str], out: Path) -> int:
    """Run `cmd` from the repository root at one thread (ENV) to the end, its output in log_path(out); the exit
    status."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path(out), "w") as f:
        return subprocess.run(
            cmd, cwd=REPO, env={**os.environ, **ENV}, stdout=f, stderr=subprocess.STDOUT
        ).returncode


def failure_reason(out: Path) -> str:
    """One line on why a run failed: its `error:` line if it printed one (train_grpo.py's own errors), else the
    last line of its log (a traceback's exception)."""
    try:
        lines = [
            line.strip() for line in log_path(out).read_text(errors="replace").splitlines() if line.strip()
        ]
    except OSError:
        return "no log"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["empty log"])[-1]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def eval_curve(rows: list[dict]) -> list[list]:
    """[step, training seconds, completions sampled, validation accuracy] at each evaluation."""
    return [
        [r["step"], r.get("time/elapsed", 0.0), r.get("num_completions", 0), r["eval/accuracy"]]
        for r in rows
        if "eval/accuracy" in r
    ]


def first_at(ev: list, threshold: float, col: int) -> float | None:
    """The seconds (col 1) or completions (col 2) at the first evaluation at or above `threshold`."""
    return next((row[col] for row in ev if row[3] >= threshold - 1e-12), None)


def test_accuracy(run_dir: Path) -> float:
    """Greedy accuracy of the run's final policy on the test split (reporting only)."""
    import torch

    from tinygrpo.data.problems import load_split
    from tinygrpo.rollout.evaluation import greedy_accuracy
    from tinygrpo.run.launch import load_model_and_tokenizer

    torch.set_num_threads(1)
    model, tok = load_model_and_tokenizer(str(run_dir / "final"), "final")
    test = load_split("addition", "test")
    return greedy_accuracy(model, tok, test.to_dict(), max_new_tokens=4)[0]


test_accuracy.__test__ = False  # a helper, not a test, should pytest ever import it by name


def mean_std(xs: list[float], fmt: str = "{:.1f}", scale: float = 1.0, unit: str = "") -> str:
    """'mean ± std' of xs * scale (the sample std, n - 1; one value alone has none)."""
    xs = [x * scale for x in xs]
    if not xs:
        return "-"
    if len(xs) == 1:
        return fmt.format(xs[0]) + unit
    return f"{fmt.format(statistics.mean(xs))} ± {fmt.format(statistics.stdev(xs))}{unit}"
