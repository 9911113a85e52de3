"""Held-out greedy accuracy of the default experiment against wall-clock seconds and sampled completions.

    python benchmarks/time_to_accuracy.py                           # train_grpo.py's defaults, 1 thread
    python benchmarks/time_to_accuracy.py --threads 2 --max_steps 300 --output_dir runs/bench/tta2
    python benchmarks/time_to_accuracy.py --max_steps 20 -- --beta 0.02    # after --: more train_grpo.py flags

Runs `python train_grpo.py` (2-digit addition from checkpoints/reference, train_grpo.py's defaults: 64 prompts x
G = 8 per step, 1000 steps, beta 0, prompts weighted toward unsolved ones, explore rounds, unless told otherwise) as a subprocess with --torch_num_threads THREADS, --logging_steps 1 (a metrics row
per step, so the summed time/step is exact) and --eval_steps EVAL_STEPS (default 5; the trainer's default is
25). Evaluation is greedy decoding of the 500 held-out problems; it does not change the training.

Reported, from the run's metrics.jsonl ("eval/accuracy" rows, "num_completions", "time/step"):
  train s     the summed time/step of the steps so far (generation, rewards, update: no eval, logging, saving)
  wall s      seconds since the step-0 evaluation row appeared in metrics.jsonl (the file is polled every 0.1 s),
              so evaluation, logging and checkpoint saving are included; process start-up is not
  completions sampled so far (num_completions)
the first evaluation at or above 90 / 95 / 98 / 99 % ("first") and the first after which every later evaluation stays
at or above it ("sustained"), and the peak resident memory of the training process: ru_maxrss of the waited child
(resource.getrusage(RUSAGE_CHILDREN)) and psutil polling of the process tree. The curve goes to
OUTPUT_DIR/time_to_accuracy.png, the numbers to OUTPUT_DIR/time_to_accuracy.json, the run's output to
OUTPUT_DIR/time_to_accuracy.log.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_BENCH_DIR, REPO_ROOT, md_table, script_parser  # noqa: E402

THRESHOLDS = (0.90, 0.95, 0.98, 0.99)


def build_parser() -> argparse.ArgumentParser:
    p = script_parser(__doc__)
    p.add_argument(
        "--max_steps", type=int, default=None, help="Training steps (default: train_grpo.py's, 1000)."
    )
    p.add_argument(
        "--model_name_or_path",
        default=None,
        help="Initial policy (default: train_grpo.py's, checkpoints/reference; trained first if missing).",
    )
    p.add_argument("--eval_steps", type=int, default=5, help="Held-out evaluation every N steps (default 5).")
    p.add_argument("--seed", type=int, default=None, help="Run seed (default: train_grpo.py's, 42).")
    p.add_argument(
        "--output_dir",
        default=str(DEFAULT_BENCH_DIR / "time_to_accuracy"),
        help="The run's output dir (overwritten). Default runs/bench/time_to_accuracy.",
    )
    p.add_argument("--dry_run", action="store_true", help="Print the train_grpo.py command and exit.")
    p.add_argument("train_args", nargs="*", help="Extra train_grpo.py flags, after `--`.")
    return p


def train_command(args) -> list[str]:
    cmd = [
        sys.executable,
        str(REPO_ROOT / "train_grpo.py"),
        "--output_dir",
        args.output_dir,
        *"--overwrite_output_dir true --torch_num_threads".split(),
        str(args.threads),
        *"--logging_steps 1 --eval_steps".split(),
        str(args.eval_steps),
        "--disable_tqdm",
        "true",
    ]
    if args.max_steps is not None:
        cmd += ["--max_steps", str(args.max_steps)]
    if args.model_name_or_path:
        cmd += ["--model_name_or_path", args.model_name_or_path]
    if args.seed is not None:
        cmd += ["--seed", str(args.seed)]
    return cmd + list(args.train_args)


def run_and_watch(cmd: list[str], metrics: Path, log: Path, poll_s: float = 0.1) -> dict:
    """Run the training subprocess; note when each metrics row appears and the peak RSS of its process tree."""
    try:
        import psutil
    except ImportError:
        psutil = None
    env = dict(
        os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=cmd[cmd.index("--torch_num_threads") + 1]
    )
    t_start = time.time()
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid) if psutil else None
    seen: dict[int, float] = {}  # metrics.jsonl line index -> time first seen
    peak_poll = 0
    while True:
        done = proc.poll() is not None
        if ps is not None and not done:
            try:
                rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
                peak_poll = max(peak_poll, rss)
            except psutil.Error:
                pass
        if metrics.is_file():
            now = time.time()
            with open(metrics) as f:
                n = sum(1 for line in f if line.endswith("\n"))
            for i in range(len(seen), n):
                seen[i] = now
        if done:
            break
        time.sleep(poll_s)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux (bytes on macOS)
    ru_bytes = ru if sys.platform == "darwin" else ru * 1024
    return {
        "returncode": proc.returncode,
        "output": log.read_text(),
        "seen": seen,
        "peak_rss_ru_maxrss": ru_bytes,
        "peak_rss_polled": peak_poll,
        "process_seconds": time.time() - t_start,
    }


def curve(metrics: Path, seen: dict[int, float]) -> list[dict]:
    """One point per evaluation: step, accuracy, completions, train seconds (summed time/step), wall seconds."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    t0 = None
    train_s, last_step, points = 0.0, 0, []
    for i, r in enumerate(rows):
        step = r.get("step", 0)
        if "time/step" in r:
            # With logging_steps 1 every step has a row; otherwise a logged step stands for the unlogged ones before it.
            train_s += r["time/step"] * max(1, step - last_step)
            last_step = step
        if "eval/accuracy" not in r:
            continue
        if t0 is None:
            t0 = seen.get(i)
        wall = seen.get(i, float("nan")) - t0 if t0 is not None else float("nan")
        points.append(
            {
                "step": step,
                "accuracy": r["eval/accuracy"],
                "completions": r.get("num_completions", 0),
                "train_s": train_s,
                "wall_s": wall,
            }
        )
    return points


def crossings(points: list[dict], threshold: float) -> tuple[dict | None, dict | None]:
    first = next((p for p in points if p["accuracy"] >= threshold), None)
    sustained = None
    for i, p in enumerate(points):
        if all(q["accuracy"] >= threshold for q in points[i:]):
            sustained = p
            break
    return first, sustained


def plot(points: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    acc = [100 * p["accuracy"] for p in points]
    axes[0].plot([p["train_s"] for p in points], acc, "o-", ms=3, label="train s (summed time/step)")
    axes[0].plot(
        [p["wall_s"] for p in points], acc, "s--", ms=3, alpha=0.7, label="wall s (incl. eval, saving)"
    )
    axes[0].set_xlabel("seconds")
    axes[1].plot([p["completions"] for p in points], acc, "o-", ms=3)
    axes[1].set_xlabel("sampled completions")
    for ax in axes:
        for t in THRESHOLDS:
            ax.axhline(100 * t, color="grey", lw=0.6, ls=":")
        ax.set_ylabel("held-out greedy accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cell(p: dict | None, key: str, fmt: str) -> str:
    return "not reached" if p is None else format(p[key], fmt)


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.threads < 1 or args.eval_steps < 1:
        raise SystemExit("--threads and --eval_steps must be >= 1")
    cmd = train_command(args)
    if args.dry_run:
        print(" ".join(cmd))
        return {}
    out = Path(args.output_dir)
    if not out.is_absolute():
        out = REPO_ROOT / out
    metrics = out / "metrics.jsonl"
    if metrics.is_file():
        metrics.unlink()  # train_grpo.py clears it too (--overwrite_output_dir), but not before we start polling
    out.mkdir(parents=True, exist_ok=True)
    print(f"running: {' '.join(cmd)}", file=sys.stderr, flush=True)
    res = run_and_watch(cmd, metrics, out / "time_to_accuracy.log")
    if res["returncode"] != 0:
        sys.stderr.write(res["output"][-4000:])
        raise SystemExit(f"train_grpo.py exited with {res['returncode']}")
    points = curve(metrics, res["seen"])
    if not points:
        raise SystemExit(f"no eval/accuracy rows in {metrics}")
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    rows = []
    for t in THRESHOLDS:
        first, sus = crossings(points, t)
        rows.append(
            [
                f"{t:.0%}",
                _cell(first, "train_s", ".1f"),
                _cell(first, "wall_s", ".1f"),
                _cell(first, "completions", ",d"),
                _cell(first, "step", "d"),
                _cell(sus, "train_s", ".1f"),
                _cell(sus, "wall_s", ".1f"),
                _cell(sus, "completions", ",d"),
            ]
        )
    last = points[-1]
    try:
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    text = [
        f"### Time to accuracy: `{' '.join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))}`\n",
        f"{args.threads} torch thread(s); load average at the end {load}; evaluation every {args.eval_steps} steps.\n",
        md_table(
            [
                "held-out accuracy",
                "first: train s",
                "first: wall s",
                "first: completions",
                "first: step",
                "sustained: train s",
                "sustained: wall s",
                "sustained: completions",
            ],
            rows,
        ),
        "",
        md_table(
            [
                "accuracy before -> after",
                "steps",
                "completions",
                "train s (summed time/step)",
                "wall s (step-0 eval -> last eval)",
                "run's wall_seconds (summary.json)",
                "process s",
                "peak RSS (ru_maxrss)",
                "peak RSS (psutil poll)",
            ],
            [
                [
                    f"{points[0]['accuracy']:.1%} -> {last['accuracy']:.1%}",
                    last["step"],
                    f"{last['completions']:,}",
                    f"{last['train_s']:.1f}",
                    f"{last['wall_s']:.1f}",
                    f"{summary.get('wall_seconds', float('nan')):.1f}",
                    f"{res['process_seconds']:.1f}",
                    f"{res['peak_rss_ru_maxrss'] / 2**20:.0f} MiB",
                    f"{res['peak_rss_polled'] / 2**20:.0f} MiB"
                    if res["peak_rss_polled"]
                    else "n/a (no psutil)",
                ]
            ],
        ),
    ]
    png = out / "time_to_accuracy.png"
    plot(points, png, f"GRPO, default experiment ({args.threads} thread(s))")
    text.append(f"\nCurve: {png}")
    report = "\n".join(text)
    print(report)
    result = {
        "command": cmd,
        "points": points,
        "peak_rss_ru_maxrss": res["peak_rss_ru_maxrss"],
        "peak_rss_polled": res["peak_rss_polled"],
        "summary": summary,
    }
    (out / "time_to_accuracy.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
