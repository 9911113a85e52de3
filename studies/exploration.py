"""Where GRPO spends its samples: the exploration study (prompt samplers, explore rounds, the default), seeds x arms.

    python -m studies.exploration --jobs 2 --docs docs   # every arm, 3 seeds: ~25 min on 2 cores
    python -m studies.exploration --arms default unsolved --seeds 1 --max_steps 50    # a quick look

Every run is `train_grpo.py` from the same reference (checkpoints/reference, 66.6 % held-out), one thread, trained on
`train_without_validation` (9,000 problems) and evaluated every EVAL_STEPS on `validation` (500 problems carved from
the training problems, none of them seen by the reference's SFT): every choice is made on validation. The test split
(500 problems) is evaluated once per run, at the end, for reporting only. Runs go one at a time (`--jobs 2` runs two
at once: faster, but each run's seconds then include the other's contention).

Writes OUTPUT_DIR/<arm>-seed<k>/ (the runs), OUTPUT_DIR/exploration.json (every curve and figure) and, with
`--docs DIR`, DIR/exploration.md (the table) and DIR/exploration.png (held-out accuracy against seconds and against
completions, and the fraction of sampled completions that carried signal).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ._runs import REPO, eval_curve, first_at, log_path, read_metrics, test_accuracy, train

# name -> (train_grpo.py flags, what it is). "default" is train_grpo.py as it is run with no flags: 64 prompts x 8
# per step, 1000 steps, prompts weighted 1 - p, explore rounds at T = 2, 3, 4 without importance weights.
ARMS: dict[str, tuple[list[str], str]] = {
    "previous default": (
        "--per_device_train_batch_size 2048 --max_steps 300 --prompt_sampler uniform --explore_rounds 0".split(),
        "256 prompts x 8 per step, 300 steps, uniform prompts, dynamic sampling (the default before this study)",
    ),
    "uniform": (
        "--prompt_sampler uniform --explore_rounds 0".split(),
        "the default's shape (64 prompts x 8, 1000 steps), uniform prompts, dynamic sampling",
    ),
    "informative": (
        "--prompt_sampler informative --explore_rounds 0".split(),
        "prompts weighted p (1 - p), no explore rounds",
    ),
    "unsolved": ("--explore_rounds 0".split(), "prompts weighted 1 - p, no explore rounds"),
    "explore+IS": (
        "--prompt_sampler uniform --explore_importance_sampling_correction true".split(),
        "uniform prompts; failed prompts resampled at T = 2, 3, 4, importance-weighted (TIS, C = 3)",
    ),
    "unsolved+explore+IS": (
        "--explore_importance_sampling_correction true".split(),
        "prompts weighted 1 - p; failed prompts resampled at T = 2, 3, 4, importance-weighted (TIS, C = 3)",
    ),
    "default": (
        [],
        "prompts weighted 1 - p; failed prompts resampled at T = 2, 3, 4, trained on without importance weights",
    ),
}
THRESHOLDS = (0.95, 0.98, 0.99)
DEFAULT_SEEDS = [42, 1, 2]
DEFAULT_EVAL_STEPS = 25


@dataclass(frozen=True)
class Study:
    """A study of train_grpo.py flags on the addition task: its arms and where its files go. The exploration study is
    one; the sample-efficiency study (sample_efficiency.py) is another with its own arms, run by this module's code."""

    name: str  # module under studies, and the stem of its files: NAME.json, NAME.md, NAME.png
    title: str
    arms: dict[str, tuple[list[str], str]]
    eval_steps: int = DEFAULT_EVAL_STEPS
    completions_at: float = 0.95  # the accuracy whose completions the table gives
    intro: str = ""  # a paragraph after the command line in NAME.md
    per_seed_at: float | None = None  # if set, NAME.md also gives each seed's seconds and completions to it


def per_seed_table(results: dict, at: float) -> list[str]:
    """Each run's training seconds and completions to its first validation evaluation at or above `at`, and the
    median over seeds with a run that never got there counted as infinitely late (as a goal "median of 3 seeds"
    reads it)."""
    lines = [
        f"| arm | training s to {at:.0%} (per seed) | median | completions to {at:.0%} (per seed) | median |",
        "|---|---|---|---|---|",
    ]
    for arm, runs in results.items():
        cells = []
        for col, fmt in ((1, "{:.1f}"), (2, "{:,.0f}")):
            got = [first_at(r["eval"], at, col) for r in runs]
            med = statistics.median(float("inf") if g is None else g for g in got)
            cells.append(" / ".join("-" if g is None else fmt.format(g) for g in got))
            cells.append("not reached" if med == float("inf") else fmt.format(med))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines


EXPLORATION = Study("exploration", "Exploration study", ARMS)


def run_one(study: Study, arm: str, seed: int, args) -> Path:
    out = Path(args.output_dir) / f"{arm}-seed{seed}"
    flags = [*study.arms[arm][0], *(["--max_steps", str(args.max_steps)] if args.max_steps else [])]
    rc = train(out, seed, args.eval_steps, args.model_name_or_path, flags)
    if rc != 0:
        raise SystemExit(f"error: {arm} seed {seed} failed (exit {rc}); see {log_path(out)}")
    return out


def curves(run_dir: Path) -> dict:
    """The run's evaluation curve (step, seconds, completions, accuracy) and its signal fraction per logged step."""
    rows = read_metrics(run_dir)
    ev = [r for r in rows if "eval/accuracy" in r]
    steps = [r for r in rows if "frac_completions_with_signal" in r]
    return {
        "eval": eval_curve(rows),
        "signal": [[r["step"], r["frac_completions_with_signal"], r["frac_reward_zero_std"]] for r in steps],
        "kinds": {k: v for k, v in ev[-1].items() if k.startswith("eval/accuracy/")},
        "kinds_before": {k: v for k, v in ev[0].items() if k.startswith("eval/accuracy/")},
        "unsolved": steps[-1].get("prompts/unsolved"),
    }


def summarise(results: dict, study: Study = EXPLORATION) -> list[dict]:
    rows = []
    for arm, runs in results.items():
        finals = [r["eval"][-1][3] for r in runs]
        tests = [r["test"] for r in runs]
        row = {
            "arm": arm,
            "what": study.arms[arm][1],
            "val_final": finals,
            "test_final": tests,
            "signal_last": statistics.median(statistics.mean(s[1] for s in r["signal"][-10:]) for r in runs),
            "signal_mean": statistics.median(statistics.mean(s[1] for s in r["signal"]) for r in runs),
            "zero_std_last": statistics.median(
                statistics.mean(s[2] for s in r["signal"][-10:]) for r in runs
            ),
            "seconds": statistics.median(r["eval"][-1][1] for r in runs),
        }
        for t in THRESHOLDS:  # medians over the runs that got there (how many did is reported beside)
            got = [g for g in (first_at(r["eval"], t, 1) for r in runs) if g is not None]
            row[f"s_to_{round(t * 100)}"] = statistics.median(got) if got else None
            row[f"reached_{round(t * 100)}"] = len(got)
            got = [g for g in (first_at(r["eval"], t, 2) for r in runs) if g is not None]
            row[f"n_to_{round(t * 100)}"] = statistics.median(got) if got else None
        rows.append(row)
    return rows


def pct(xs: list[float]) -> str:
    return " / ".join(f"{x:.1%}" for x in xs)


def write_markdown(rows: list[dict], results: dict, args, path: Path, study: Study = EXPLORATION) -> None:
    at = round(study.completions_at * 100)
    head = (
        "| arm | validation, final (per seed) | test, final (per seed) | training s to 95 / 98 / 99 % on validation "
        f"(median of the runs that got there; how many) | completions to {at} % | samples with signal: whole run / last 50 steps | zero-std groups, last "
        "50 steps |"
    )
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        s = " / ".join(
            (f"{r[f's_to_{t}']:.0f}" if r[f"s_to_{t}"] is not None else "-") + f" ({r[f'reached_{t}']})"
            for t in (95, 98, 99)
        )
        n = f"{r[f'n_to_{at}'] / 1e6:.2f} M ({r[f'reached_{at}']})" if r[f"n_to_{at}"] is not None else "-"
        lines.append(
            f"| {r['arm']} | {pct(r['val_final'])} | {pct(r['test_final'])} | {s} | {n} | "
            f"{r['signal_mean']:.1%} / {r['signal_last']:.1%} | {r['zero_std_last']:.1%} |"
        )
    kinds = [
        "| arm | " + " | ".join(k.split("/")[-1] for k in sorted(results[rows[0]["arm"]][0]["kinds"])) + " |"
    ]
    kinds.append("|" + "---|" * (len(kinds[0].split("|")) - 2))
    first = results[rows[0]["arm"]][0]
    kinds.append(
        "| reference | "
        + " | ".join(f"{first['kinds_before'][k]:.1%}" for k in sorted(first["kinds"]))
        + " |"
    )
    for r in rows:
        runs = results[r["arm"]]
        cells = [statistics.median(run["kinds"][k] for run in runs) for k in sorted(runs[0]["kinds"])]
        kinds.append(f"| {r['arm']} | " + " | ".join(f"{c:.1%}" for c in cells) + " |")
    what = "\n".join(f"- **{r['arm']}**: {r['what']}" for r in rows)
    # The flags that shape the results (where the runs and the docs go do not).
    cmd = ["--jobs", str(args.jobs)]
    if args.arms != list(study.arms):
        cmd += ["--arms", *args.arms]
    if args.seeds != DEFAULT_SEEDS:
        cmd += ["--seeds", *map(str, args.seeds)]
    if args.max_steps:
        cmd += ["--max_steps", str(args.max_steps)]
    if args.eval_steps != study.eval_steps:
        cmd += ["--eval_steps", str(args.eval_steps)]
    cmd = shlex.join([*cmd, "--docs", "docs"])
    steps = args.max_steps or "each arm's own"
    intro = f"{study.intro}\n\n" if study.intro else ""
    path.write_text(
        f"# {study.title}\n\nGenerated by `python -m studies.{study.name} {cmd}`"
        f" ({steps} steps, seeds {', '.join(map(str, args.seeds))}, one thread, "
        f"{args.jobs} run(s) at a time). Trained on `train_without_validation`, curves and every choice on "
        f"`validation`; `test` evaluated once at the end, for reporting.\n\n{intro}{what}\n\n"
        + "\n".join(lines)
        + (
            f"\n\nEach seed, on validation (evaluated every {args.eval_steps} steps):\n\n"
            + "\n".join(per_seed_table(results, study.per_seed_at))
            if study.per_seed_at
            else ""
        )
        + "\n\nValidation accuracy by problem kind at the end (median over seeds):\n\n"
        + "\n".join(kinds)
        + f"\n\n![{study.name}]({study.name}.png)\n"
    )


def plot(rows: list[dict], results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for i, r in enumerate(rows):
        color = f"C{i}"
        for j, run in enumerate(results[r["arm"]]):
            ev = run["eval"]
            label = r["arm"] if j == 0 else None
            axes[0].plot([e[1] for e in ev], [e[3] for e in ev], color=color, alpha=0.8, label=label)
            axes[1].plot([e[2] / 1e6 for e in ev], [e[3] for e in ev], color=color, alpha=0.8, label=label)
            sig = run["signal"]
            axes[2].plot([s[0] for s in sig], [s[1] for s in sig], color=color, alpha=0.6, label=label)
    for ax, xl in zip(axes[:2], ("training seconds (time/elapsed)", "completions sampled (M)"), strict=True):
        ax.set_xlabel(xl)
        ax.set_ylabel("validation greedy accuracy")
        ax.set_ylim(0.9, 1.0)
        for t in THRESHOLDS:
            ax.axhline(t, color="grey", lw=0.5, ls=":")
    axes[2].set_xlabel("step")
    axes[2].set_ylabel("sampled completions with a non-zero advantage")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    return run_study(EXPLORATION, __doc__, argv)


def run_study(study: Study, doc: str, argv: list[str] | None = None) -> int:
    """The command line of a study: run its arms x seeds (or reuse them), then its JSON, table and figure."""
    p = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        epilog=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arms = list(study.arms)
    p.add_argument("--arms", nargs="+", default=arms, choices=arms, help="Arms to run (default all).")
    p.add_argument("--seeds", nargs="+", type=int, default=DEFAULT_SEEDS, help="Run seeds (default 42 1 2).")
    p.add_argument(
        "--max_steps", type=int, default=None, help="Steps of every run (default: each arm's own)."
    )
    p.add_argument(
        "--eval_steps",
        type=int,
        default=study.eval_steps,
        help=f"Validation evaluation every N steps (default {study.eval_steps}).",
    )
    p.add_argument(
        "--model_name_or_path",
        default=str(REPO / "checkpoints" / "reference"),
        help="The reference every run starts from (default checkpoints/reference).",
    )
    p.add_argument("--jobs", type=int, default=1, help="Runs at once (default 1: seconds are uncontended).")
    p.add_argument(
        "--output_dir",
        default=f"runs/{study.name}",
        help=f"Where the runs go (default runs/{study.name}).",
    )
    p.add_argument(
        "--docs", default=None, help=f"Write {study.name}.md and {study.name}.png here (e.g. docs)."
    )
    p.add_argument("--reuse", action="store_true", help="Keep runs already finished in OUTPUT_DIR.")
    p.add_argument(
        "--rewrite_docs",
        action="store_true",
        help=f"Run nothing: write the docs again from OUTPUT_DIR/{study.name}.json (with --docs).",
    )
    args = p.parse_args(argv)
    if args.jobs < 1 or (args.max_steps is not None and args.max_steps < 1) or args.eval_steps < 1:
        print("error: --jobs, --max_steps and --eval_steps must be >= 1", file=sys.stderr)
        return 1
    out = Path(args.output_dir)
    if args.rewrite_docs:
        results = json.loads((out / f"{study.name}.json").read_text())["runs"]
        write_docs(study, summarise(results, study), results, args)
        return 0
    if not (Path(args.model_name_or_path) / "config.json").is_file():
        print(
            f"error: no model at {args.model_name_or_path} (missing config.json): run python train_sft.py first",
            file=sys.stderr,
        )
        return 1

    todo = [(a, s) for a in args.arms for s in args.seeds]

    def job(item: tuple[str, int]) -> Path:
        arm, seed = item
        out = Path(args.output_dir) / f"{arm}-seed{seed}"
        if args.reuse and (out / "final" / "config.json").is_file():
            return out
        print(f"{arm} seed {seed} ...", flush=True)
        return run_one(study, arm, seed, args)

    with ThreadPoolExecutor(args.jobs) as pool:
        dirs = list(pool.map(job, todo))
    results: dict[str, list[dict]] = {}
    for (arm, _), d in zip(todo, dirs, strict=True):
        c = curves(d)
        c["test"] = test_accuracy(d)
        results.setdefault(arm, []).append(c)
    rows = summarise(results, study)
    (out / f"{study.name}.json").write_text(json.dumps({"rows": rows, "runs": results}, indent=1))
    for r in rows:
        print(
            f"{r['arm']:>22}: validation {pct(r['val_final'])}  test {pct(r['test_final'])}  "
            f"s to 95/98/99 % {r['s_to_95']}/{r['s_to_98']}/{r['s_to_99']}  signal {r['signal_last']:.1%}"
        )
    write_docs(study, rows, results, args)
    return 0


def write_docs(study: Study, rows: list[dict], results: dict, args) -> None:
    if args.docs:
        docs = Path(args.docs)
        docs.mkdir(parents=True, exist_ok=True)
        md, png = docs / f"{study.name}.md", docs / f"{study.name}.png"
        write_markdown(rows, results, args, md, study)
        plot(rows, results, png)
        print(f"wrote {md} and {png}")


if __name__ == "__main__":
    sys.exit(main())
