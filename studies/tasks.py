"""The tasks table: each task's reference and its GRPO recipe, over seeds, on the test split.

    python -m studies.tasks                                   # every built-in task but addition, 3 seeds
    python -m studies.tasks --tasks reverse countdown --seeds 42 1 2
    python -m studies.tasks --summarize                       # the table from the runs already there

For each task: its reference (`python train_sft.py --task NAME` into checkpoints/NAME, trained first if missing),
then `python train_grpo.py --config configs/NAME.yaml --seed S` per seed, two runs side by side at one thread each
(runs/tasks/NAME/seed<S>). The recipes were chosen on the validation split (docs/tasks.md); these runs evaluate on
the test split, for reporting. The table (docs/tasks_table.md, printed too): an example problem, the mean length of
the reference's sampled completions, the reference's held-out greedy accuracy, the accuracy after GRPO (median and
each seed), and the training time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._runs import REPO, read_metrics, run_logged

DEFAULT_TASKS = ("reverse", "countdown", "multiplication", "multiplication_scratchpad", "addition_long")


def ensure_reference(name: str) -> Path:
    from tinygrpo.task import get_task

    path = REPO / get_task(name).reference["output_dir"]
    if not (path / "config.json").is_file():
        print(f"training the reference of {name} (python train_sft.py --task {name})", flush=True)
        subprocess.run([sys.executable, "train_sft.py", "--task", name], cwd=REPO, check=True)
    return path


def run_dir(out: Path, name: str, seed: int) -> Path:
    return out / name / f"seed{seed}"


def grpo(name: str, seed: int, out: Path) -> int:
    """One GRPO run of the task's recipe (one thread); its output beside its directory."""
    from tinygrpo.task import get_task

    d = run_dir(out, name, seed)
    cmd = [sys.executable, "train_grpo.py", "--config", get_task(name).config, "--seed", str(seed)]
    cmd += ["--output_dir", str(d), "--overwrite_output_dir", "true", "--torch_num_threads", "1"]
    cmd += ["--disable_tqdm", "true", "--save_steps", "0"]
    return run_logged(cmd, d)


def row(name: str, seeds: list[int], out: Path) -> list[str] | None:
    """The table's row of a task from its finished runs (None when none finished)."""
    from tinygrpo.task import get_task

    task = get_task(name)
    runs = []
    for s in seeds:
        d = run_dir(out, name, s)
        if (d / "summary.json").is_file():
            runs.append((s, json.loads((d / "summary.json").read_text()), read_metrics(d)))
    if not runs:
        return None
    test = json.loads((task.data_dir / "test.jsonl").read_text().splitlines()[0])
    column = (task.reference or {}).get("completion_column", "answer")
    example = f"`{test['prompt']}` -> `{test[column]}<eos>`"
    before = runs[0][1]["eval_before"]["eval/accuracy"]
    after = [r[1]["eval_after"]["eval/accuracy"] for r in runs]
    lengths = [
        next(m["completions/mean_length"] for m in r[2] if "completions/mean_length" in m) for r in runs
    ]
    seconds = [next(m["time/elapsed"] for m in reversed(r[2]) if "time/elapsed" in m) for r in runs]
    each = " / ".join(f"{a:.1%}" for a in after)
    return [
        f"`{name}`",
        example,
        f"{statistics.median(lengths):.1f}",
        f"{before:.1%}",
        f"**{statistics.median(after):.1%}** ({each}; seeds {', '.join(str(r[0]) for r in runs)})",
        f"{statistics.median(after) - before:+.1%}".replace("%", " points"),
        f"{statistics.median(seconds) / 60:.1f}",
        f"`python train_sft.py --task {name}`, then `accelerate launch train_grpo.py --config {task.config}`",
    ]


HEAD = [
    "task",
    "example (test split)",
    "mean completion tokens (reference, sampled)",
    "reference held-out",
    "after GRPO (median of seeds; each)",
    "gain",
    "minutes of training (1 thread)",
    "commands",
]


def table(names: list[str], seeds: list[int], out: Path) -> str:
    rows = [r for r in (row(n, seeds, out) for n in names) if r is not None]
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    p.add_argument("--seeds", nargs="+", type=int, default=[42, 1, 2])
    p.add_argument("--out", type=Path, default=REPO / "runs" / "tasks")
    p.add_argument("--parallel", type=int, default=2, help="runs side by side (one thread each; default 2)")
    p.add_argument("--summarize", action="store_true", help="only print the table of the runs already there")
    p.add_argument("--table", type=Path, default=REPO / "docs" / "tasks_table.md")
    args = p.parse_args(argv)
    from tinygrpo.task import get_task

    for name in args.tasks:
        get_task(name)  # an unknown task fails here, before any run
    if not args.summarize:
        for name in args.tasks:
            ensure_reference(name)
        jobs = [(n, s) for n in args.tasks for s in args.seeds]
        with ThreadPoolExecutor(args.parallel) as pool:
            codes = list(pool.map(lambda job: grpo(*job, args.out), jobs))
        failed = [f"{n} seed {s}" for (n, s), c in zip(jobs, codes, strict=True) if c != 0]
        if failed:
            print(f"failed: {', '.join(failed)} (see their logs under {args.out})", file=sys.stderr)
    text = table(args.tasks, args.seeds, args.out)
    print(text)
    args.table.write_text(text + "\n")


if __name__ == "__main__":
    main()
