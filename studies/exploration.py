"""Where GRPO spends its samples: the exploration study (prompt samplers, explore rounds, the default), seeds x arms.

    python -m studies.exploration --jobs 2 --docs docs   # every arm, 3 seeds: ~25 min on 2 cores
    python -m studies.exploration --arms default unsolved --seeds 1 --max_steps 50    # a quick look

Every run is `train_grpo.py` from the same reference (checkpoints/reference, 66.6 % held-out), one thread, trained on
`train_without_validation` (9,000 problems) and evaluated every EVAL_STEPS on `validation` (500 problems carved from
the training problems, none of them seen by the reference's SFT): every choice is made on validation. The test split
(500 problems) is evaluated once per run, at the end, for reporting only. Runs go one at a time (`--jobs 2` runs two
at once: faster, but each run's seconds then include the other's contention).

Writes OUTPUT_DIR/<arm>-seed<k>/ (the runs), OUTPUT_DIR/exploration.json (every curve, and the results) and, with
`--docs DIR`, DIR/results/exploration.json (the results: each seed's final accuracies, the medians to 95 / 98 / 99 %,
the signal, the accuracy by problem kind, with the command and the machine), DIR/exploration.md (the page, drawn
from that file alone by `page`: `python -m studies.results` draws it again) and DIR/exploration.png (held-out
accuracy against seconds and against completions, and the fraction of sampled completions that carried signal).
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
from .results import each, markdown, measurement, pct, save, write_page

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


def key(threshold: float) -> str:
    """A threshold as the results file names it: 0.95 -> '95'."""
    return str(round(threshold * 100))


def summarize(
    runs: dict[str, list[dict]],
    study: Study,
    seeds: list[int],
    command: str,
    *,
    jobs: int = 1,
    max_steps: int | None = None,
    eval_steps: int | None = None,
) -> dict:
    """The study's results (docs/results/NAME.json) from its runs' curves (`curves`, each with its "test"), the runs
    of each arm in the order of `seeds`: per arm, each seed's final validation and test accuracy; for each threshold
    the median training seconds and completions to the first validation evaluation at or above it over the runs that
    got there, and how many did; the medians over seeds of the signal fractions (whole run, last 10 logged steps =
    50 steps) and of the accuracy by problem kind at the end; with study.per_seed_at, each seed's seconds and
    completions to it (None: never). The page (`page`) is drawn from this alone."""
    keys = [str(s) for s in seeds]
    arms = []
    for arm, rs in runs.items():
        by_seed = list(zip(keys, rs, strict=True))
        row: dict = {
            "arm": arm,
            "what": study.arms[arm][1],
            "validation_final": {k: r["eval"][-1][3] for k, r in by_seed},
            "test_final": {k: r["test"] for k, r in by_seed},
            "signal_whole_run": statistics.median(statistics.mean(s[1] for s in r["signal"]) for r in rs),
            "signal_last_50_steps": statistics.median(
                statistics.mean(s[1] for s in r["signal"][-10:]) for r in rs
            ),
            "zero_std_whole_run": statistics.median(statistics.mean(s[2] for s in r["signal"]) for r in rs),
            "zero_std_last_50_steps": statistics.median(
                statistics.mean(s[2] for s in r["signal"][-10:]) for r in rs
            ),
            "to": {},
            "kinds": {
                k.split("/")[-1]: statistics.median(r["kinds"][k] for r in rs) for k in sorted(rs[0]["kinds"])
            },
        }
        for t in THRESHOLDS:
            got = [(first_at(r["eval"], t, 1), first_at(r["eval"], t, 2)) for r in rs]
            got = [g for g in got if g[0] is not None]
            row["to"][key(t)] = {
                "runs": len(got),
                "seconds": statistics.median(g[0] for g in got) if got else None,
                "completions": statistics.median(g[1] for g in got) if got else None,
            }
        if study.per_seed_at is not None:
            row["per_seed_to"] = {
                what: {k: first_at(r["eval"], study.per_seed_at, col) for k, r in by_seed}
                for what, col in (("seconds", 1), ("completions", 2))
            }
        arms.append(row)
    first = next(iter(runs.values()))[0]
    return {
        "measurement": measurement(command, threads=1, jobs=jobs),
        "study": study.name,
        "title": study.title,
        "intro": study.intro,
        "seeds": list(seeds),
        "max_steps": max_steps,
        "eval_steps": eval_steps or study.eval_steps,
        "completions_at": study.completions_at,
        "per_seed_at": study.per_seed_at,
        "reference_kinds": {k.split("/")[-1]: first["kinds_before"][k] for k in sorted(first["kinds"])},
        "arms": arms,
    }


# ------------------------------------------------------------------------------------------------ the page


def table(results: dict) -> str:
    """Each arm's final accuracies per seed, the training seconds (and completions) to each threshold, the signal."""
    at = key(results["completions_at"])
    head = [
        "arm",
        "validation, final (per seed)",
        "test, final (per seed)",
        f"training s to {' / '.join(results['arms'][0]['to'])} % on validation (median of the runs that got "
        "there; how many)",
        f"completions to {at} %",
        "samples with signal (frac_completions_with_signal): whole run / last 50 steps",
        "zero-std groups (frac_reward_zero_std): whole run / last 50 steps",
    ]
    rows = []
    for r in results["arms"]:
        s = " / ".join(
            ("-" if v["seconds"] is None else f"{v['seconds']:.0f}") + f" ({v['runs']})"
            for v in r["to"].values()
        )
        c = r["to"][at]
        n = f"{c['completions'] / 1e6:.2f} M ({c['runs']})" if c["runs"] else "-"
        rows.append(
            [
                r["arm"],
                each(list(r["validation_final"].values())),
                each(list(r["test_final"].values())),
                s,
                n,
                f"{pct(r['signal_whole_run'])} / {pct(r['signal_last_50_steps'])}",
                f"{pct(r.get('zero_std_whole_run'))} / {pct(r['zero_std_last_50_steps'])}",
            ]
        )
    return markdown(head, rows)


def per_seed_table(results: dict) -> str:
    """Each run's training seconds and completions to its first validation evaluation at or above per_seed_at, and
    the median over seeds with a run that never got there counted as infinitely late (as a goal "median of 3 seeds"
    reads it)."""
    at = results["per_seed_at"]
    head = [
        "arm",
        f"training s to {at:.0%} (per seed)",
        "median",
        f"completions to {at:.0%} (per seed)",
        "median",
    ]
    rows = []
    for r in results["arms"]:
        cells = [r["arm"]]
        for what, fmt in (("seconds", "{:.1f}"), ("completions", "{:,.0f}")):
            got = list(r["per_seed_to"][what].values())
            med = statistics.median(float("inf") if g is None else g for g in got)
            cells.append(" / ".join("-" if g is None else fmt.format(g) for g in got))
            cells.append("not reached" if med == float("inf") else fmt.format(med))
        rows.append(cells)
    return markdown(head, rows)


def kinds_table(results: dict) -> str:
    """Validation accuracy by problem kind: the reference's, then each arm's at the end (median over seeds)."""
    kinds = list(results["reference_kinds"])
    rows = [["reference", *(pct(results["reference_kinds"][k]) for k in kinds)]]
    rows += [[r["arm"], *(pct(r["kinds"][k]) for k in kinds)] for r in results["arms"]]
    return markdown(["arm", *kinds], rows)


def page(results: dict) -> str:
    """The whole page a study generates (docs/NAME.md), from its results file alone."""
    m = results["measurement"]
    seeds = ", ".join(map(str, results["seeds"]))
    intro = f"{results['intro']}\n\n" if results["intro"] else ""
    what = "\n".join(f"- **{r['arm']}**: {r['what']}" for r in results["arms"])
    per_seed = (
        f"\n\nEach seed, on validation (evaluated every {results['eval_steps']} steps):\n\n{per_seed_table(results)}"
        if results["per_seed_at"] is not None
        else ""
    )
    steps = results["max_steps"] or "each arm's own"
    return (
        f"# {results['title']}\n\nGenerated by `{m['command']}` ({steps} steps, "
        f"seeds {seeds}, one thread, {m['jobs']} run(s) at a time). Trained on `train_without_validation`, curves and "
        f"every choice on `validation`; `test` evaluated once at the end, for reporting.\n\n{intro}{what}\n\n"
        f"{table(results)}{per_seed}\n\nValidation accuracy by problem kind at the end (median over seeds):\n\n"
        f"{kinds_table(results)}\n\n![{results['study']}]({results['study']}.png)"
    )


def headline(results: dict) -> str:
    """The default's row of the main table (`table`): its final accuracy on each seed, its seconds to 95 / 98 /
    99 %; for a summary elsewhere (the README)."""
    return table({**results, "arms": [r for r in results["arms"] if r["arm"] == "default"]})


def command_line(study: Study, args) -> str:
    """The command as the page gives it: the flags that shape the results (where the runs go does not)."""
    cmd = ["--jobs", str(args.jobs)]
    if args.arms != list(study.arms):
        cmd += ["--arms", *args.arms]
    if args.seeds != DEFAULT_SEEDS:
        cmd += ["--seeds", *map(str, args.seeds)]
    if args.max_steps:
        cmd += ["--max_steps", str(args.max_steps)]
    if args.eval_steps != study.eval_steps:
        cmd += ["--eval_steps", str(args.eval_steps)]
    return f"python -m studies.{study.name} " + shlex.join([*cmd, "--docs", "docs"])


def plot(arms: list[str], runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for i, arm in enumerate(arms):
        color = f"C{i}"
        for j, run in enumerate(runs[arm]):
            ev = run["eval"]
            label = arm if j == 0 else None
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


# ------------------------------------------------------------------------------------------------ the command line


def main(argv: list[str] | None = None) -> int:
    return run_study(EXPLORATION, __doc__, argv)


def run_study(study: Study, doc: str, argv: list[str] | None = None) -> int:
    """The command line of a study: run its arms x seeds (or reuse them), then its results, page and figure."""
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

    def results_of(runs: dict[str, list[dict]]) -> dict:
        return summarize(
            runs,
            study,
            args.seeds,
            command_line(study, args),
            jobs=args.jobs,
            max_steps=args.max_steps,
            eval_steps=args.eval_steps,
        )

    if args.rewrite_docs:
        data = json.loads((out / f"{study.name}.json").read_text())
        # the results as they were measured (the runs' own command and machine); a file from before they were kept
        # in it: summarized again from its runs
        write_docs(study, data.get("results") or results_of(data["runs"]), data["runs"], args)
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
    runs: dict[str, list[dict]] = {}
    for (arm, _), d in zip(todo, dirs, strict=True):
        c = curves(d)
        c["test"] = test_accuracy(d)
        runs.setdefault(arm, []).append(c)
    results = results_of(runs)
    (out / f"{study.name}.json").write_text(json.dumps({"results": results, "runs": runs}, indent=1))
    print(table(results))
    write_docs(study, results, runs, args)
    return 0


def write_docs(study: Study, results: dict, runs: dict[str, list[dict]], args) -> None:
    """With --docs DIR: the results in DIR/results/NAME.json, the page drawn from them (one marked block, so that
    tests/test_results.py draws it again) in DIR/NAME.md, the figure from the runs in DIR/NAME.png."""
    if args.docs:
        docs = Path(args.docs)
        data = save(docs / "results" / f"{study.name}.json", results)
        md = write_page(docs / f"{study.name}.md", "studies.exploration:page", data)
        png = docs / f"{study.name}.png"
        plot([r["arm"] for r in results["arms"]], runs, png)
        print(f"wrote {data}, {md} and {png}")


if __name__ == "__main__":
    sys.exit(main())
