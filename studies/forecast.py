"""The signal forecast against the signal measured: on each task, the share of groups forecast to carry signal
before the first step (tinygrpo/algorithm/forecast.py) beside the share the run's first 20 steps had.

    python -m studies.forecast                                # every built-in task with a reference, 3 seeds
    python -m studies.forecast --tasks reverse addition_long --seeds 42
    python -m studies.forecast --summarize                    # the table from the runs already there

Each run is the task's GRPO recipe (`--config configs/<task>.yaml`) for 20 steps, every step logged, no evaluation,
on the training split it trains on (runs/forecast/<task>/seed<S>). The forecast samples G completions of 256 training
prompts drawn uniformly from the reference; the measured share is 1 - frac_reward_zero_std of each step's first round
(the groups before dynamic sampling's refills or explore rounds), averaged over steps 1-20. The two differ where the
run's prompts are not drawn uniformly (the recipes weight them toward the unsolved ones) and as the policy moves.
The results (docs/results/forecast.json) and the table drawn from them are in docs/tasks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._runs import REPO, add_output_and_jobs, read_metrics, run_logged
from .results import RESULTS, each, markdown, measurement, merged, pct, save

TASKS = (
    "addition",
    "seed_bank",
    "reverse",
    "countdown",
    "multiplication",
    "multiplication_scratchpad",
    "multiplication_mixed",
    "addition_long",
    "addition_long_reversed",
    "addition_long_worked",
    "addition_long_mixed",
    "chain_sum",
    "chain_sum_worked",
)
STEPS = 20
PROMPTS = 256
WITHIN = 0.10  # the bar: forecast within 10 points of the measured share


def config_of(name: str) -> str:
    """The task's GRPO recipe; the default experiment's for addition."""
    from tinygrpo.data.task import get_task

    return get_task(name).config or "configs/default.yaml"


def model_of(name: str) -> Path:
    """The task's reference; addition's for a task without one of its own (the seed bank)."""
    from tinygrpo.data.task import get_task

    reference = get_task(name).reference
    return REPO / (reference["output_dir"] if reference else "checkpoints/reference")


def run(name: str, seed: int, out: Path) -> int:
    d = out / name / f"seed{seed}"
    cmd = [sys.executable, "train_grpo.py", "--config", config_of(name), "--seed", str(seed)]
    cmd += [
        "--model_name_or_path",
        str(model_of(name)),
        "--output_dir",
        str(d),
        "--overwrite_output_dir",
        "true",
    ]
    cmd += [
        "--max_steps",
        str(STEPS),
        "--logging_steps",
        "1",
        "--dataset_test_split",
        "",
        "--save_steps",
        "0",
    ]
    cmd += ["--signal_forecast_prompts", str(PROMPTS), "--torch_num_threads", "1", "--disable_tqdm", "true"]
    cmd += ["--make_plots", "false", "--make_report", "false", "--log_completions", "false"]
    return run_logged(cmd, d)


def measured(rows: list[dict]) -> tuple[dict, float, float]:
    """The forecast's row (step 0), the mean share of first-round groups with signal over steps 1-STEPS, and that
    share at step 1 (the reference's own groups, before any update: what the forecast estimates)."""
    forecast = next(r for r in rows if "forecast/frac_groups_with_signal" in r)
    early = [
        1 - r["frac_reward_zero_std"]
        for r in rows
        if 1 <= r.get("step", 0) <= STEPS and "frac_reward_zero_std" in r
    ]
    if len(early) != STEPS:
        raise ValueError(f"{len(early)} of the first {STEPS} steps logged (logging_steps 1 logs each)")
    return forecast, statistics.fmean(early), early[0]


def summarize(names: list[str], seeds: list[int], out: Path, command: str) -> dict:
    tasks = []
    for name in names:
        runs = {}
        for s in seeds:
            d = out / name / f"seed{s}"
            if (d / "summary.json").is_file():
                forecast, share, first = measured(read_metrics(d))
                G = next(k.removeprefix("forecast/pass@") for k in forecast if k.startswith("forecast/pass@"))
                runs[str(s)] = {
                    "forecast": forecast["forecast/frac_groups_with_signal"],
                    "pass_at_g": forecast[f"forecast/pass@{G}"],
                    "pass_rate": forecast["forecast/pass_rate"],
                    "seconds": forecast["time/forecast"],
                    "measured": share,
                    "step_1": first,
                    "G": int(G),
                }
        if runs:
            tasks.append(
                {
                    "task": name,
                    "config": config_of(name),
                    "runs": runs,
                    "measured": measurement(command, threads=1),
                }
            )
    return {
        "measurement": measurement(command, threads=1, side_by_side=2),
        "steps": STEPS,
        "prompts": PROMPTS,
        "tasks": tasks,
    }


def table(results: dict) -> str:
    """docs/tasks.md's forecast table (docs/results/forecast.json): per task, the forecast share of groups with
    signal and pass@G (median over seeds), the share measured over the first steps (median), their largest gap over
    seeds, and whether every seed is within 10 points."""
    head = [
        "task",
        "forecast: groups with signal (median; each seed)",
        "pass@G forecast",
        f"measured, steps 1-{results['steps']} (median; each seed)",
        "largest gap",
        "measured at step 1 (median)",
        "forecast seconds",
    ]
    rows = []
    for t in results["tasks"]:
        r = list(t["runs"].values())
        gaps = [abs(x["forecast"] - x["measured"]) for x in r]
        gap = f"{100 * max(gaps):.1f} points" + ("" if max(gaps) <= WITHIN else " (over 10)")
        rows.append(
            [
                f"`{t['task']}`",
                f"{pct(statistics.median(x['forecast'] for x in r))} ({each([x['forecast'] for x in r])})",
                f"{pct(statistics.median(x['pass_at_g'] for x in r))} (G = {r[0]['G']})",
                f"{pct(statistics.median(x['measured'] for x in r))} ({each([x['measured'] for x in r])})",
                gap,
                pct(statistics.median(x["step_1"] for x in r)),
                f"{statistics.median(x['seconds'] for x in r):.1f}",
            ]
        )
    return markdown(head, rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    p.add_argument("--seeds", nargs="+", type=int, default=[42, 1, 2])
    add_output_and_jobs(p, REPO / "runs" / "forecast")
    p.add_argument("--summarize", action="store_true", help="only summarize the runs already there")
    p.add_argument("--results", type=Path, default=RESULTS / "forecast.json", help="where the results go")
    args = p.parse_args(argv)
    missing = [n for n in args.tasks if not (model_of(n) / "config.json").is_file()]
    if missing and not args.summarize:
        sys.exit(
            "error: no reference for "
            + ", ".join(missing)
            + " (train each with `python train_sft.py --task NAME`; addition's: `python train_sft.py`)"
        )
    if not args.summarize:
        jobs = [(n, s) for n in args.tasks for s in args.seeds]
        with ThreadPoolExecutor(args.parallel) as pool:
            codes = list(pool.map(lambda job: run(*job, args.out), jobs))
        failed = [f"{n} seed {s}" for (n, s), c in zip(jobs, codes, strict=True) if c != 0]
        if failed:
            print(f"failed: {', '.join(failed)} (see their logs under {args.out})", file=sys.stderr)
    command = (
        f"python -m studies.forecast --tasks {' '.join(args.tasks)} --seeds {' '.join(map(str, args.seeds))}"
    )
    results = summarize(args.tasks, args.seeds, args.out, command)
    old = json.loads(args.results.read_text()) if args.results.is_file() else None
    save(args.results, merged(old, results, TASKS))  # (the other tasks' rows kept)
    print(table(results))
    print(f"wrote {args.results}; python -m studies.results renders the docs' tables from it")


if __name__ == "__main__":
    main()
