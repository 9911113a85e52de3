"""The tasks table: each task's reference and its GRPO recipe, over seeds, on the test split.

    python -m studies.tasks                                   # every built-in task but addition, 3 seeds
    python -m studies.tasks --tasks reverse countdown --seeds 42 1 2
    python -m studies.tasks --summarize                       # the table from the runs already there

For each task: its reference (`python train_sft.py --task NAME` into checkpoints/NAME, trained first if missing),
then `python train_grpo.py --config configs/NAME.yaml --seed S` per seed, two runs side by side at one thread each
(runs/tasks/NAME/seed<S>). The recipes were chosen on the validation split (docs/tasks.md); these runs evaluate on
the test split, for reporting. The results (docs/results/tasks.json) and the table drawn from them (in docs/tasks.md,
printed too): an example problem, the mean length of the reference's sampled completions, the reference's held-out
greedy accuracy, the accuracy after GRPO (median and each seed), and the training time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._runs import REPO, add_output_and_jobs, read_metrics, run_logged
from .results import RESULTS, each, markdown, measurement, median, merged, pct, save

DEFAULT_TASKS = (
    "reverse",
    "countdown",
    "multiplication",
    "multiplication_scratchpad",
    "addition_long",
    "addition_long_reversed",
    "addition_long_worked",
    "chain_sum",
    "chain_sum_worked",
    "reasoning_gym:chain_sum_worked",
)
# Negative results kept on purpose: the same problems in a format a small model does not learn, beside the formats it
# does (docs/tasks.md). The table labels them.
CONTROLS = {
    "multiplication": "control: the answer alone, for multiplication_scratchpad",
    "addition_long": "control: the answer alone, for addition_long_reversed and _worked",
    "chain_sum": "control: the answer alone, for chain_sum_worked",
}


def reference_of(name: str) -> tuple[str, Path]:
    """The task whose reference the task's recipe starts from (its config's model_name_or_path: its own, or another
    task's, as reasoning_gym:chain_sum_worked starts from chain_sum_worked's), and where that reference is."""
    import yaml

    from tinygrpo.data.task import get_task, task_of_reference

    start = yaml.safe_load((REPO / get_task(name).config).read_text())["model_name_or_path"]
    owner = task_of_reference(start)
    if owner is None:
        raise ValueError(f"{name}: its config starts from {start}, which no task's reference recipe trains")
    return owner.name, REPO / start


def ensure_reference(name: str) -> Path:
    """The reference the task's recipe starts from, trained first if missing."""
    owner, path = reference_of(name)
    if not (path / "config.json").is_file():
        print(f"training the reference of {owner} (python train_sft.py --task {owner})", flush=True)
        subprocess.run([sys.executable, "train_sft.py", "--task", owner], cwd=REPO, check=True)
    return path


def run_dir(out: Path, name: str, seed: int) -> Path:
    return out / name.replace(":", "_") / f"seed{seed}"  # (a family task: reasoning_gym_chain_sum_worked/)


def grpo(name: str, seed: int, out: Path) -> int:
    """One GRPO run of the task's recipe (one thread); its output beside its directory."""
    from tinygrpo.data.task import get_task

    d = run_dir(out, name, seed)
    cmd = [sys.executable, "train_grpo.py", "--config", get_task(name).config, "--seed", str(seed)]
    cmd += ["--output_dir", str(d), "--overwrite_output_dir", "true", "--torch_num_threads", "1"]
    cmd += ["--disable_tqdm", "true", "--save_steps", "0"]
    return run_logged(cmd, d)


def summarize(names: list[str], seeds: list[int], out: Path, command: str) -> dict:
    """What the table shows of each task with finished runs, from its runs: an example, the reference's held-out
    accuracy, each seed's after GRPO, and the medians over seeds of the reference's mean sampled length and of the
    training seconds."""
    from tinygrpo.data.task import get_task

    tasks = []
    for name in names:
        task = get_task(name)
        runs = []
        for s in seeds:
            d = run_dir(out, name, s)
            if (d / "summary.json").is_file():
                runs.append((s, json.loads((d / "summary.json").read_text()), read_metrics(d)))
        if not runs:
            continue
        test = json.loads((task.data_dir / "test.jsonl").read_text().splitlines()[0])
        column = (task.reference or {}).get("completion_column", "answer")
        lengths = [
            next(m["completions/mean_length"] for m in r[2] if "completions/mean_length" in m) for r in runs
        ]
        seconds = [next(m["time/elapsed"] for m in reversed(r[2]) if "time/elapsed" in m) for r in runs]
        tasks.append(
            {
                "task": name,
                "prompt": test["prompt"],
                "completion": f"{test[column]}<eos>",
                "config": task.config,
                "reference_task": reference_of(name)[0],
                "reference": runs[0][1]["eval_before"]["eval/accuracy"],
                "after": {str(r[0]): r[1]["eval_after"]["eval/accuracy"] for r in runs},
                "mean_length": statistics.median(lengths),
                "minutes": statistics.median(seconds) / 60,
                "measured": measurement(command, threads=1, side_by_side=2),
            }
        )
    return {"measurement": measurement(command, threads=1, side_by_side=2), "tasks": tasks}


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


def table(results: dict) -> str:
    """docs/tasks.md's table (markdown) from docs/results/tasks.json."""
    rows = []
    for t in results["tasks"]:
        after = list(t["after"].values())
        mid = median(after)
        rows.append(
            [
                f"`{t['task']}`" + (f" ({CONTROLS[t['task']]})" if t["task"] in CONTROLS else ""),
                f"`{t['prompt']}` -> `{t['completion']}`",
                f"{t['mean_length']:.1f}",
                pct(t["reference"]),
                f"**{pct(mid)}** ({each(after)}; seeds {', '.join(t['after'])})",
                f"{100 * (mid - t['reference']):+.1f} points",
                f"{t['minutes']:.1f}",
                f"`python train_sft.py --task {t.get('reference_task', t['task'])}`, then `accelerate launch "
                f"train_grpo.py --config "
                f"{t['config']}`",
            ]
        )
    return markdown(HEAD, rows)


# The hand-typed tables of docs/tasks.md (screens and one-off runs, their commands in each results file's measurement).


def _lr(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


def references_table(results: dict) -> str:
    """docs/tasks.md's references (docs/results/tasks_references.json): each task's reference model, its SFT recipe
    and its greedy accuracy on the validation split (and what a longer run, or the worked share, gave)."""
    rows, previous = [], None
    for i, r in enumerate(results["references"]):
        m = r["model"]
        model = (
            f"{m['layers']} layers, {m['width']} wide ({m['parameters']:,}{' parameters' if i == 0 else ''})"
        )
        sft = r["sft"] + (f" ({r['sft_minutes']:.0f} min)" if r.get("sft_minutes") is not None else "")
        validation = pct(r["validation"], space=True)
        if r.get("longer"):
            validation += f" ({r['longer']['steps']} steps: {pct(r['longer']['validation'], space=True)})"
        if r.get("worked") is not None:
            validation += f" ({pct(r['worked'], space=True)} of greedy completions worked)"
        name = f"`{r['task']}`" + (f" ({r['note']})" if r.get("note") else "")
        rows.append([name, "the same" if m == previous else model, sft, validation])
        previous = m
    return markdown(["task", "model", "SFT", "validation"], rows)


def _at_steps(evals: dict[str, float]) -> str:
    return ", ".join(f"{pct(a, space=True)} at step {s}" for s, a in evals.items())


def recipes_table(results: dict) -> str:
    """docs/tasks.md's GRPO recipe screen (docs/results/tasks_recipes.json; validation, one seed): from each task's
    reference, its held-out accuracy at the steps evaluated under the default method and at a lower rate without
    explore rounds (and at the other rates tried, after a ';')."""
    default, low = results["default_lr"], results["lr"]
    head = [
        "task",
        f"default method (lr {_lr(default)}, explore rounds)",
        f"lr {_lr(low)}, no explore rounds",
    ]
    rows = []
    for r in results["rows"]:
        ref = pct(r["reference"], space=True)
        if r["default"] is None:  # (a recipe chosen without trying the default method: it was already there)
            first = "not run"
        else:
            first = f"{ref} -> {_at_steps(r['default']['evals'])}"
            first += " (collapsed, stopped)" if r["default"].get("collapsed") else ""
        second = f"{ref} -> {_at_steps(r['no_explore']['evals'])}"
        second += "".join(f"; at lr {_lr(o['lr'])} {_at_steps(o['evals'])}" for o in r.get("other_lr", []))
        rows.append([f"`{r['task']}`", first, second])
    return markdown(head, rows)


def reasoning_gym_table(results: dict) -> str:
    """docs/tasks.md's reasoning-gym table (docs/results/tasks_reasoning_gym.json): an example, the reference's
    held-out accuracy, after GRPO (median of seeds, in bold where the gain over the reference is larger than the
    seeds' spread; each seed) and the median training seconds."""
    head = [
        "dataset",
        "example prompt -> answer",
        "reference",
        "after GRPO (median; each)",
        "training (median)",
    ]
    rows = []
    for r in results["datasets"]:
        name = f"`{r['dataset']}`"
        if r["sft_steps"] != results["sft_steps"]:
            name += (
                f" (reference of {r['sft_steps']} SFT steps, `--max_steps {r['sft_steps']}`: at "
                f"{results['sft_steps']} it answers {pct(r['validation_at_default_steps'], space=True)} of "
                "validation)"
            )
        after = list(r["after"].values())
        mid = median(after)
        shown = pct(mid, space=True)
        if mid - r["reference"] > max(after) - min(after):
            shown = f"**{shown}**"
        rows.append(
            [
                name,
                f"`{r['prompt']}` -> `{r['answer']}`",
                pct(r["reference"], space=True),
                f"{shown} ({each(after, lambda x: f'{100 * x:.1f}')})",
                f"{r['seconds']:.0f} s",
            ]
        )
    return markdown(head, rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    p.add_argument("--seeds", nargs="+", type=int, default=[42, 1, 2])
    add_output_and_jobs(p, REPO / "runs" / "tasks")
    p.add_argument("--summarize", action="store_true", help="only summarize the runs already there")
    p.add_argument("--results", type=Path, default=RESULTS / "tasks.json", help="where the results go")
    args = p.parse_args(argv)
    from tinygrpo.data.task import get_task

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
    command = (
        "python -m studies.tasks --tasks "
        + " ".join(args.tasks)
        + " --seeds "
        + " ".join(map(str, args.seeds))
    )
    results = summarize(args.tasks, args.seeds, args.out, command)
    results = merged(
        json.loads(args.results.read_text()) if args.results.is_file() else None, results, DEFAULT_TASKS
    )
    save(args.results, results)
    print(table(results))
    print(f"wrote {args.results}; python -m studies.results renders the docs' tables from it")


if __name__ == "__main__":
    main()
