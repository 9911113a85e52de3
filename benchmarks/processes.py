"""Scaling over CPU processes: 2 processes of one thread against 1 process of one thread, same global batch.

    python benchmarks/processes.py                     # 256 x 8 global, 40 steps, 2 alternating repetitions
    python benchmarks/processes.py --skip_zero_advantage_groups false --reps 1

Runs `train_grpo.py` (the default experiment's model and data) as subprocesses, alternating, per repetition:
  1 process                  per_device_train_batch_size = the global batch;
  2 processes (DDP)          `accelerate launch --config_file configs/accelerate/cpu_2proc.yaml`, half each;
  2 independent, half each   two plain one-process runs at once on half the batch each, with no collective
                             between them: the ceiling this machine gives two busy processes (the slower of the
                             two at each step).
The work per step is held fixed so that the runs compare: uniform prompts, no dynamic sampling, no explore rounds,
beta 0, no evaluation or checkpoints. Reported: the median over the steps after --skip of time/step, time/generate
and time/optimize (the main process's own clocks; under DDP a step ends with the slower process, as every step
holds collectives), the throughput in completions/s of the global batch, and the speed-ups over one process.
With skip_zero_advantage_groups (the default) the update trains only on the groups that carry signal, and which
process holds them is left to chance. (Dealing those groups out evenly over the processes before the update was
tried: at 256 x 8 the shares are already close, and the two extra collectives made the step slower.) The medians go
to --results (docs/results/processes.json, written whole), which benchmarks/README.md's table is drawn from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # python benchmarks/processes.py (imported as benchmarks.processes: the docs' table)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import (  # noqa: E402
    REPO_ROOT,
    command_line,
    machine_line,
    md_table,
    parse_bool,
    script_parser,
    set_threads,
)
from studies.results import RESULTS, markdown, measurement, save  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = script_parser(__doc__)
    p.add_argument("--prompts", type=int, default=256, help="Global prompts per step (default 256; x G = 8).")
    p.add_argument("--steps", type=int, default=40, help="Training steps per run (default 40).")
    p.add_argument(
        "--skip", type=int, default=5, help="Steps left out of the medians at the start (default 5)."
    )
    p.add_argument("--reps", type=int, default=2, help="Alternating repetitions (default 2).")
    p.add_argument(
        "--skip_zero_advantage_groups",
        type=parse_bool,
        default=True,
        help="As train_grpo.py (default true): groups without signal stay out of the forward/backward.",
    )
    p.add_argument(
        "--model_name_or_path",
        default=None,
        help="The initial policy of every run (default: train_grpo.py's, checkpoints/reference, which the first run "
        "trains if it is missing).",
    )
    p.add_argument(
        "--results",
        default=str(RESULTS / "processes.json"),
        help="The results file the docs' table is drawn from, written whole (default docs/results/processes.json; "
        "'' for none).",
    )
    return p


def command(n_proc: int, args, out: Path, per_device: int) -> list[str]:
    train = [
        "train_grpo.py",
        *f"--max_steps {args.steps} --logging_steps 1 --dataset_test_split none --save_steps 0 --disable_tqdm true".split(),
        *"--make_plots false --make_report false --prompt_sampler uniform --explore_rounds 0".split(),
        *f"--dynamic_sampling false --beta 0 --torch_num_threads {args.threads} --overwrite_output_dir true".split(),
        *f"--skip_zero_advantage_groups {str(args.skip_zero_advantage_groups).lower()}".split(),
        *f"--per_device_train_batch_size {per_device} --output_dir {out}".split(),
        *(["--model_name_or_path", args.model_name_or_path] if args.model_name_or_path else []),
    ]
    launch = (
        [sys.executable, *train]
        if n_proc == 1
        else [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            "configs/accelerate/cpu_2proc.yaml",
            *train,
        ]
    )
    return launch


def env(args) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")


def rows_of(out: Path, skip: int) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "time/step" in r][skip:]


def run(n_proc: int, args, out: Path) -> list[dict]:
    """One run on n_proc processes (DDP), the global batch split between them."""
    launch = command(n_proc, args, out, args.prompts * 8 // n_proc)
    proc = subprocess.run(launch, cwd=REPO_ROOT, env=env(args), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: the {n_proc}-process run failed:\n{proc.stderr[-3000:]}")
    return rows_of(out, args.skip)


def run_apart(args, out: Path) -> list[dict]:
    """Two independent one-process runs at once, each on half the global batch (no collectives): what the machine
    gives two busy processes. Rows: the slower of the two at each step."""
    outs = [out / "a", out / "b"]
    procs = [
        subprocess.Popen(
            command(1, args, o, args.prompts * 8 // 2),
            cwd=REPO_ROOT,
            env=env(args),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for o in outs
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"error: an independent half-batch run failed:\n{err[-3000:]}")
    a, b = (rows_of(o, args.skip) for o in outs)
    return [x if x["time/step"] >= y["time/step"] else y for x, y in zip(a, b, strict=True)]


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.prompts % 2 or args.steps <= args.skip or args.reps < 1:
        raise SystemExit("error: --prompts must be even, --steps > --skip, --reps >= 1")
    set_threads(args.threads)  # (as each run's: the machine line printed below names this process's threads)
    got: dict[str, list[dict]] = {ONE: [], DDP: [], APART: []}
    with tempfile.TemporaryDirectory(prefix="tinygrpo-procs-") as tmp:
        for rep in range(args.reps):
            for n, name in ((1, "1 process"), (2, "2 processes (DDP)")):
                print(f"rep {rep + 1}: {name} ...", file=sys.stderr, flush=True)
                got[name] += run(n, args, Path(tmp) / f"{n}_{rep}")
            print(f"rep {rep + 1}: 2 independent processes ...", file=sys.stderr, flush=True)
            got["2 independent, half each"] += run_apart(args, Path(tmp) / f"apart_{rep}")
    N = args.prompts * 8  # completions per step over all processes (and over both independent runs)
    med, length = medians(got)
    table = [
        [
            n,
            f"{1000 * m['time/step']:.1f}",
            f"{N / m['time/step']:,.0f}",
            f"{1000 * m['time/generate']:.1f}",
            f"{1000 * m['time/optimize']:.1f}",
            f"{length[n]:.2f}",
        ]
        for n, m in med.items()
    ]
    one = med["1 process"]
    for name in ("2 processes (DDP)", "2 independent, half each"):
        table.append(
            [
                f"speed-up: {name}",
                f"{one['time/step'] / med[name]['time/step']:.2f}x",
                "",
                f"{one['time/generate'] / med[name]['time/generate']:.2f}x",
                f"{one['time/optimize'] / med[name]['time/optimize']:.2f}x",
                "",
            ]
        )
    print(
        f"### 1 vs 2 CPU processes, {args.prompts} x 8 global per step\n\n{machine_line(args.threads)}; {args.reps} alternating "
        f"repetitions of {args.steps} steps, medians over the steps after the first {args.skip}; uniform prompts, no "
        f"dynamic sampling or exploration, beta 0, skip_zero_advantage_groups "
        f"{str(args.skip_zero_advantage_groups).lower()}.\n"
    )
    print(
        md_table(
            ["processes", "ms/step", "completions/s", "generate ms", "update ms", "mean completion length"],
            table,
        )
    )
    if args.results:
        command = command_line("processes.py", argv)
        save(args.results, summarize(med, length, args, command))
        print(
            f"wrote {args.results}; python -m studies.results draws the docs' table from it", file=sys.stderr
        )
    return med


# ------------------------------------------------------------------------------------------------ results
KEYS = ("time/step", "time/generate", "time/optimize")


def medians(got: dict[str, list[dict]]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Per run (its metrics rows after --skip, every repetition): the median over steps of each of KEYS, and the
    mean completion length."""
    med = {n: {k: statistics.median(r[k] for r in rows) for k in KEYS} for n, rows in got.items()}
    length = {n: statistics.mean(r["completions/mean_length"] for r in rows) for n, rows in got.items()}
    return med, length


ONE, DDP, APART = "1 process", "2 processes (DDP)", "2 independent, half each"


def summarize(med: dict[str, dict[str, float]], length: dict[str, float], args, command: str) -> dict:
    """docs/results/processes.json from the medians over steps of each run (time/step, time/generate,
    time/optimize, s) and its mean completion length: ms, completions/s of the global batch, and each run's
    speed-ups over one process."""
    N = args.prompts * 8
    rows = []
    for name, m in med.items():
        row = {
            "run": name,
            "step_ms": 1000 * m["time/step"],
            "completions_per_s": N / m["time/step"],
            "generate_ms": 1000 * m["time/generate"],
            "update_ms": 1000 * m["time/optimize"],
            "mean_length": length[name],
        }
        if name != ONE:
            row["speedup"] = {
                part: med[ONE][key] / m[key]
                for part, key in (
                    ("step", "time/step"),
                    ("generate", "time/generate"),
                    ("update", "time/optimize"),
                )
            }
        rows.append(row)
    setting = {
        "prompts": args.prompts,
        "G": 8,
        "steps": args.steps,
        "skip": args.skip,
        "reps": args.reps,
        "threads": args.threads,
        "skip_zero_advantage_groups": args.skip_zero_advantage_groups,
    }
    return {"measurement": measurement(command, **setting), "rows": rows}


LABELS = {
    ONE: "1 process",
    DDP: "2 processes (DDP, `configs/accelerate/cpu_2proc.yaml`)",
    APART: "2 independent processes at once, half the batch each",
}


def _ms(r: dict, part: str, bold: bool = False) -> str:
    """'50.8 (1.43x)': a part's median ms and its speed-up over one process (none on one process's own row)."""
    ms = f"{r[part + '_ms']:.1f}"
    if "speedup" not in r:
        return ms
    x = f"{r['speedup'][part]:.2f}x"
    return f"{ms} ({f'**{x}**' if bold else x})"


def table(results: dict) -> str:
    """benchmarks/README.md's table from docs/results/processes.json: per run the median ms per step (the speed-up
    over one process, DDP's in bold), completions/s, and the generation's and the update's ms (their speed-ups)."""
    rows = [
        [
            LABELS.get(r["run"], r["run"]),
            _ms(r, "step", bold=r["run"] == DDP),
            f"{r['completions_per_s']:,.0f}",
            _ms(r, "generate"),
            _ms(r, "update"),
        ]
        for r in results["rows"]
    ]
    return markdown(["run", "ms per step", "completions/s", "generate ms", "update ms"], rows)


if __name__ == "__main__":
    main()
