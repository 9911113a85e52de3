"""GRPO variants side by side: loss aggregations, baselines, importance ratios and entropy terms, seeds x variants.

    python -m studies.sweep --docs docs      # every variant, 3 seeds, 2 at once: ~25 min on 2 cores
    python -m studies.sweep --variants grpo rloo --seeds 1 --max_steps 50    # a quick look
    python -m studies.sweep --variants "dapo (default)" cispo --extra "--learning_rate 1e-3"

Every run is `train_grpo.py` as the studies run it (studies/_runs.py: from checkpoints/reference, one
thread, trained on `train_without_validation`, evaluated every EVAL_STEPS on `validation`; the `test` split is
evaluated once per run, at the end, for reporting only), then BASE_FLAGS, then the variant's flags, then --extra
(later flags win). The default set is DEFAULT_VARIANTS; `--variants` picks any of VARIANTS.

BASE_FLAGS split each generated batch of 512 into four optimizer steps of 128 (`--per_device_train_batch_size 128
--steps_per_generation 4`, TRL's spelling of what was `--num_mini_batches 4`), so from the second on the policy
that is updated is no longer the one that sampled. With one mini-batch (and one iteration) the importance ratio is
exactly 1 and the clip (dapo, grpo, ...), CISPO's clipped weights, SAPO's soft gate, GSPO's sequence ratio and
GMPO's geometric mean all give the plain policy gradient: the ratio-based variants would differ only in how they
sum tokens, and the sweep would not measure what they are for.

A step of this study is a generation (4 optimizer steps): its runs get `--max_generations` and their eval and logging
intervals in optimizer steps (UPDATES times the study's), and their curves are read back in generations.

Budget: DEFAULT_MAX_STEPS = 300 steps (evaluated every 25) for every variant (20 x 3 seeds, 2 runs at a time): about
25 minutes on 2 cores (two 300-step runs at once take ~45 s). The cosine learning rate decays to 0 at max_steps, so a
shorter run is a compressed schedule, not the start of a longer one; with BASE_FLAGS the default loss ends near 95 %
on validation at 300 steps, so the 95 % columns say which variants get there within the budget.

Writes OUTPUT_DIR/<variant>-seed<k>/ (the runs, each with its log beside it), OUTPUT_DIR/sweep.json (every curve
and number) and, with `--docs DIR`, DIR/results/sweep.json (the results: what the page shows, mean and std over
seeds, with the command and the machine), DIR/sweep.md (drawn from that file alone, between markers that
`python -m studies.results` renders again: `page`, its table `table`; `headline` is the README's short table) and
DIR/sweep.png (validation accuracy against completions sampled, mean over seeds, from the runs). A variant whose flags train_grpo.py rejects is reported and not run; a run
that fails is reported with its error line; the others go on, and the command exits 1 at the end.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._runs import (
    REPO,
    THREADS,
    eval_curve,
    failure_reason,
    first_at,
    log_path,
    read_metrics,
    test_accuracy,
    train,
)
from .results import markdown, measurement, save

# name -> (train_grpo.py flags, what it is). "dapo (default)" is train_grpo.py with no flags.
VARIANTS: dict[str, tuple[list[str], str]] = {
    "dapo (default)": (
        [],
        "TRL's default loss: token sum over the global batch / its token count (DAPO, Yu et al. 2025)",
    ),
    "grpo": (
        "--loss_type grpo".split(),
        "per-sequence token mean, then mean over sequences (Shao et al. 2024)",
    ),
    "dr_grpo": (
        "--loss_type dr_grpo --scale_rewards none".split(),
        "token sum / a constant, advantages not divided by the group std (Dr. GRPO, Liu et al. 2025)",
    ),
    "bnpo": ("--loss_type bnpo".split(), "token sum / the tokens of the local batch (BNPO)"),
    "rloo": ("--advantage_mode rloo".split(), "leave-one-out group baseline (RLOO, Ahmadian et al. 2024)"),
    "reinforce": ("--advantage_mode reinforce".split(), "raw reward, no baseline (REINFORCE, Williams 1992)"),
    "gspo": (
        "--importance_sampling_level sequence --loss_type grpo".split(),
        "length-normalised sequence-level ratio, per-sequence loss as in the paper (GSPO, Zheng et al. 2025)",
    ),
    "cispo": (
        "--loss_type cispo --epsilon_high 5.0".split(),
        "clipped, detached importance weight times the log-prob, every token kept (CISPO, MiniMax-M1, 2025)",
    ),
    "sapo": (
        "--loss_type sapo".split(),
        "soft gate on the ratio instead of a hard clip (SAPO, Gao et al. 2025)",
    ),
    "gmpo": (
        "--loss_type gmpo".split(),
        "geometric mean of the token ratios (Geometric-Mean Policy Optimization, Zhao et al. 2025)",
    ),
    "reinforce_pp": (
        "--advantage_mode reinforce_pp".split(),
        "reward whitened over every token of the batch, no group baseline (REINFORCE++, Hu 2025)",
    ),
    "opo": (
        "--advantage_mode opo".split(),
        "length-weighted optimal baseline (OPO, Hao et al. 2025, On-Policy RL with Optimal reward baseline)",
    ),
    "reinforce_pp_baseline": (
        "--advantage_mode reinforce_pp_baseline".split(),
        "group mean subtracted, then whitened over the batch's tokens (REINFORCE++-baseline, Hu 2025)",
    ),
    "remax": (
        "--advantage_mode remax".split(),
        "baseline: the reward of the prompt's greedy answer (ReMax, Li et al. 2023)",
    ),
    "pass_at_k": (
        "--advantage_mode pass_at_k --train_pass_k 4".split(),
        "the pass@4 objective's advantages (Pass@k Training, Chen et al. 2025)",
    ),
    "vespo": (
        "--loss_type vespo".split(),
        "Gamma weight of the sequence ratio times the log-prob (VESPO, 2026)",
    ),
    "luspo": (
        "--loss_type luspo --importance_sampling_level sequence".split(),
        "GSPO's sequence ratio, loss summed over tokens (LUSPO, 2026)",
    ),
    "kl 0.02": (
        "--beta 0.02".split(),
        "a k3 KL penalty to the reference, importance-corrected (DeepSeekMath; DeepSeek-V3.2's correction)",
    ),
    "entropy": ("--entropy_coef 0.01".split(), "entropy bonus, coefficient 0.01"),
    "top_entropy": (
        "--top_entropy_quantile 0.2".split(),
        "loss on the 20 % highest-entropy tokens only (Wang et al. 2025, Beyond the 80/20 rule)",
    ),
}
DEFAULT_VARIANTS = list(VARIANTS)  # every variant
UPDATES = 4  # optimizer steps per generated batch
BASE_FLAGS = [
    *f"--per_device_train_batch_size {512 // UPDATES} --steps_per_generation {UPDATES}".split(),
    *f"--logging_steps {5 * UPDATES}".split(),
]  # why: the module docstring
THRESHOLDS = (0.90, 0.95)
DEFAULT_SEEDS = [42, 1, 2]
DEFAULT_MAX_STEPS = 300
DEFAULT_EVAL_STEPS = 25


def run_name(variant: str, seed: int) -> str:
    return f"{variant}-seed{seed}"


def run_flags(variant: str, max_steps: int, extra: list[str]) -> list[str]:
    """The flags after the common ones; --extra last, so that it overrides the variant (later flags win)."""
    return ["--max_generations", str(max_steps), *BASE_FLAGS, *VARIANTS[variant][0], *extra]


def unknown_variants(names: list[str]) -> str | None:
    """The one-line error for names not in VARIANTS, or None."""
    bad = [n for n in names if n not in VARIANTS]
    if not bad:
        return None
    known = ", ".join(repr(n) for n in VARIANTS)
    return f"error: unknown variant(s) {', '.join(repr(n) for n in bad)}; known: {known}"


def rejected(flags: list[str]) -> str | None:
    """train_grpo.py's own complaint about these flags (an option or a value it does not have yet), or None: checked
    here, in a second, rather than from a run's log after it started."""
    from tinygrpo.run.config import ConfigError, parse_config

    try:
        parse_config(flags)
    except ConfigError as e:
        return str(e)
    return None


def collect_run(run_dir: Path, seed: int, test_fn: Callable[[Path], float] = test_accuracy) -> dict:
    """One finished run: its validation curve ([step, seconds, completions, accuracy] rows) and its test accuracy."""
    ev = [[s // UPDATES, *rest] for s, *rest in eval_curve(read_metrics(run_dir))]  # (in generations)
    if not ev:
        raise ValueError(f"no evaluation in {run_dir / 'metrics.jsonl'}")
    return {"seed": seed, "eval": ev, "test": test_fn(run_dir)}


def summarise(results: dict[str, list[dict]]) -> list[dict]:
    """Per variant, the per-seed numbers the table shows: final validation and test accuracy, and the seconds and
    completions at which validation first reached each threshold (only the seeds that reached it)."""
    rows = []
    for variant, runs in results.items():
        if not runs:
            continue
        row = {
            "variant": variant,
            "what": VARIANTS[variant][1] if variant in VARIANTS else "",
            "flags": VARIANTS[variant][0] if variant in VARIANTS else [],
            "seeds": [r["seed"] for r in runs],
            "val_final": [r["eval"][-1][3] for r in runs],
            "test_final": [r["test"] for r in runs],
        }
        for t in THRESHOLDS:
            key = round(t * 100)
            row[f"s_to_{key}"] = [s for s in (first_at(r["eval"], t, 1) for r in runs) if s is not None]
            row[f"n_to_{key}"] = [n for n in (first_at(r["eval"], t, 2) for r in runs) if n is not None]
        rows.append(row)
    return rows


def _ms(xs: list[float]) -> dict:
    """Mean and sample std of per-seed numbers (one value alone has no std)."""
    return {"mean": statistics.mean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else None}


def summarize(data: dict) -> dict:
    """The results (docs/results/sweep.json) from the study's runs (`data`: the rows of `summarise`, the runs and
    the settings): what docs/sweep.md shows, mean and std over seeds, and the seconds and completions to each
    threshold only when every seed got there (a mean over the seeds that did would flatter a variant that often does
    not)."""
    first = [run["eval"][0][3] for runs in data["runs"].values() for run in runs if run["eval"][0][0] == 0]
    variants = []
    for r in data["rows"]:
        n = len(r["seeds"])
        row = {
            "variant": r["variant"],
            "what": r["what"],
            "flags": r["flags"],
            "seeds": n,
            "validation": _ms(r["val_final"]),
            "test": _ms(r["test_final"]),
        }
        for t in THRESHOLDS:
            key = round(t * 100)
            s, c = r[f"s_to_{key}"], r[f"n_to_{key}"]
            every = len(s) == n
            row[f"to_{key}"] = {
                "reached": len(s),
                "seconds": _ms(s) if every else None,
                "completions": _ms(c) if every else None,
            }
        variants.append(row)
    return {
        "measurement": measurement(data["command"], threads=data["threads"], jobs=data["jobs"]),
        "model": data["model"],
        "base_flags": data["base_flags"],
        "extra": data["extra"],
        "max_steps": data["max_steps"],
        "eval_steps": data["eval_steps"],
        "seeds": data["seeds"],
        "thresholds": list(THRESHOLDS),
        "reference_validation": statistics.mean(first) if first else None,
        "variants": variants,
        "failed": data["failed"],
    }


def _cell(ms: dict, fmt: str, scale: float, unit: str) -> str:
    """'mean ± std' (the std only with more than one seed) of a number scaled for display."""
    text = fmt.format(ms["mean"] * scale)
    return (text if ms["std"] is None else f"{text} ± {fmt.format(ms['std'] * scale)}") + unit


def _reached(row: dict, key: int, what: str, fmt: str, scale: float, unit: str) -> str:
    """mean ± std when every seed got there, else how many did."""
    to = row[f"to_{key}"]
    return (
        f"n/a ({to['reached']}/{row['seeds']} reached)"
        if to[what] is None
        else _cell(to[what], fmt, scale, unit)
    )


def table(results: dict) -> str:
    """docs/sweep.md's table from docs/results/sweep.json: per variant, validation and test accuracy at the end, and
    the seconds and completions to each threshold, mean ± std over seeds."""
    ts = [round(t * 100) for t in results["thresholds"]]
    head = ["variant", "what", "validation, final", "test, final"]
    for t in ts:
        head += [f"seconds to {t} %", f"completions to {t} %"]
    rows = []
    for r in results["variants"]:
        cells = [
            r["variant"],
            r["what"],
            _cell(r["validation"], "{:.1f}", 100, " %"),
            _cell(r["test"], "{:.1f}", 100, " %"),
        ]
        for t in ts:
            cells.append(_reached(r, t, "seconds", "{:.0f}", 1, " s"))
            cells.append(_reached(r, t, "completions", "{:.2f}", 1e-6, " M"))
        rows.append(cells)
    return markdown(head, rows)


def headline(results: dict) -> str:
    """The table in short (for the README): test and validation at the end, completions / seconds to each
    threshold."""
    ts = [round(t * 100) for t in results["thresholds"]]
    head = ["variant", "test, final", "validation, final", *(f"completions / seconds to {t} %" for t in ts)]
    rows = []
    for r in results["variants"]:
        cells = [
            r["variant"],
            _cell(r["test"], "{:.1f}", 100, " %"),
            _cell(r["validation"], "{:.1f}", 100, " %"),
        ]
        for t in ts:
            to = r[f"to_{t}"]
            if to["seconds"] is None:
                cells.append(f"n/a ({to['reached']} of {r['seeds']} seeds reached it)")
            else:
                cells.append(
                    f"{_cell(to['completions'], '{:.2f}', 1e-6, ' M')} / {_cell(to['seconds'], '{:.0f}', 1, ' s')}"
                )
        rows.append(cells)
    return markdown(head, rows)


def page(results: dict) -> str:
    """docs/sweep.md below its title, from docs/results/sweep.json: how the runs were made, the table, each
    variant's flags and what failed."""
    m = results["measurement"]
    ref = results["reference_validation"]
    extra = results["extra"]
    flags = "\n".join(
        f"- **{r['variant']}**: `{shlex.join(r['flags']) or '(none)'}`" for r in results["variants"]
    )
    failed = results["failed"]
    fail = "".join(f"\n- {f['variant']} seed {f['seed']}: {f['reason']}" for f in failed)
    return (
        f"Generated by `{m['command']}`.\n\n"
        f"Each run: `python train_grpo.py` as the studies run it (from `{results['model']}`, trained on "
        f"`train_without_validation`, validation every {results['eval_steps']} steps) with `--max_steps "
        f"{results['max_steps']}`, the base flags `{shlex.join(results['base_flags'])}` (several optimizer steps per "
        "generated batch, so that the importance ratio is not 1 and the ratio-based variants act), the variant's "
        f"flags{' and `' + shlex.join(extra) + '`' if extra else ''}. Seeds "
        f"{', '.join(map(str, results['seeds']))}; {m['threads']}, {m['jobs']} run(s) at a time on "
        f"{m['machine']['cores']} CPU cores (with more than one, a run's seconds include the others' contention). "
        "Every number is mean ± std over the seeds (sample std); every choice is made on `validation`, `test` is "
        "evaluated once at the end, for reporting. The reference: "
        f"{'not evaluated' if ref is None else f'{ref * 100:.1f} %'} on validation. Seconds are training seconds "
        '(`time/elapsed`: evaluation excluded); "to 90 %" is the first evaluation at or above it, "n/a (k/n reached)" '
        "when only k of the n seeds got there.\n\n"
        + table(results)
        + f"\n\nFlags of each variant:\n\n{flags}\n"
        + (f"\nFailed or not run:{fail}\n" if failed else "")
    )


def write_markdown(results: dict, path: Path, results_path: Path) -> None:
    """The page: its title, the study's text between markers that name its results file (so that
    `python -m studies.results` draws it again), the figure."""
    text = (
        f"# GRPO variants\n\n<!-- results studies.sweep:page {shown_path(str(results_path))} -->\n"
        f"{page(results).strip(chr(10))}\n<!-- /results -->\n\n"
        "![validation accuracy against completions](sweep.png)\n"
    )
    path.write_text(text)


def mean_curve(runs: list[dict]) -> tuple[list[float], list[float]]:
    """Completions and validation accuracy averaged over seeds at each evaluation step that every seed has."""
    by_step: dict[int, list[list]] = {}
    for run in runs:
        for row in run["eval"]:
            by_step.setdefault(row[0], []).append(row)
    steps = sorted(s for s, rs in by_step.items() if len(rs) == len(runs))
    x = [statistics.mean(r[2] for r in by_step[s]) for s in steps]
    y = [statistics.mean(r[3] for r in by_step[s]) for s in steps]
    return x, y


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, r in enumerate(data["rows"]):
        x, y = mean_curve(data["runs"][r["variant"]])
        # the colour cycle has ten colours: past ten variants, dashes tell a colour's two users apart
        ax.plot([v / 1e6 for v in x], y, color=f"C{i % 10}", ls="-" if i < 10 else "--", label=r["variant"])
    for t in THRESHOLDS:
        ax.axhline(t, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("completions sampled (M)")
    ax.set_ylabel("validation greedy accuracy (mean over seeds)")
    seeds = ", ".join(map(str, data["seeds"]))
    ax.set_title(f"GRPO variants: {data['max_steps']} steps, seeds {seeds}, {shlex.join(data['base_flags'])}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(results: dict, data: dict, docs: Path) -> None:
    """DOCS/results/sweep.json (the results), DOCS/sweep.md (drawn from them) and DOCS/sweep.png (the runs' mean
    curves)."""
    docs.mkdir(parents=True, exist_ok=True)
    path = save(docs / "results" / "sweep.json", results)
    write_markdown(results, docs / "sweep.md", path)
    if data["rows"]:
        plot(data, docs / "sweep.png")
    print(f"wrote {path}, {docs / 'sweep.md'} and {docs / 'sweep.png'}")


def shown_path(path: str) -> str:
    """A path inside the repository as a relative one, so that the docs do not name this machine's checkout."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="python -m studies.sweep",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--variants",
        nargs="+",
        default=DEFAULT_VARIANTS,
        help=f"Variants to run (default: {', '.join(DEFAULT_VARIANTS)}; all: {', '.join(VARIANTS)}).",
    )
    p.add_argument("--seeds", nargs="+", type=int, default=DEFAULT_SEEDS, help="Run seeds (default 42 1 2).")
    p.add_argument(
        "--max_steps",
        type=int,
        default=DEFAULT_MAX_STEPS,
        help=f"Generations of every run, {UPDATES} optimizer steps each (default {DEFAULT_MAX_STEPS}).",
    )
    p.add_argument(
        "--eval_steps",
        type=int,
        default=DEFAULT_EVAL_STEPS,
        help=f"Validation evaluation every N steps (default {DEFAULT_EVAL_STEPS}).",
    )
    p.add_argument("--jobs", type=int, default=2, help="Runs at once, one thread each (default 2).")
    p.add_argument(
        "--model_name_or_path",
        default=str(REPO / "checkpoints" / "reference"),
        help="The reference every run starts from (default checkpoints/reference).",
    )
    p.add_argument("--output_dir", default="runs/sweep", help="Where the runs go (default runs/sweep).")
    p.add_argument("--docs", default=None, help="Write sweep.md and sweep.png here (e.g. docs).")
    p.add_argument(
        "--extra",
        default="",
        help='train_grpo.py flags added to every run, last (e.g. "--learning_rate 1e-3"; one bare flag: --extra=--flag).',
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="Keep runs already finished in OUTPUT_DIR (whatever flags they were run with).",
    )
    args = p.parse_args(argv)
    if err := unknown_variants(args.variants):
        print(err, file=sys.stderr)
        return 1
    if args.jobs < 1 or args.max_steps < 1 or args.eval_steps < 1:
        print("error: --jobs, --max_steps and --eval_steps must be >= 1", file=sys.stderr)
        return 1
    try:
        extra = shlex.split(args.extra)
    except ValueError as e:
        print(f"error: --extra {args.extra!r}: {e}", file=sys.stderr)
        return 1
    if not (Path(args.model_name_or_path) / "config.json").is_file():
        print(
            f"error: no model at {args.model_name_or_path} (missing config.json): run python train_sft.py first",
            file=sys.stderr,
        )
        return 1
    variants = list(dict.fromkeys(args.variants))  # a name given twice is run once
    seeds = list(dict.fromkeys(args.seeds))
    out_dir = Path(args.output_dir)

    failed: list[dict] = []

    def fail(variant: str, seed: int | str, reason: str) -> None:
        failed.append({"variant": variant, "seed": seed, "reason": reason})
        print(f"FAILED {variant} seed {seed}: {reason}", file=sys.stderr, flush=True)

    runnable = []
    for v in variants:
        if why := rejected(run_flags(v, args.max_steps, extra)):
            fail(v, "all", f"not run: train_grpo.py rejects its flags: {why}")
        else:
            runnable.append(v)
    todo = [(v, s) for v in runnable for s in seeds]

    def job(item: tuple[str, int]) -> int:
        variant, seed = item
        out = out_dir / run_name(variant, seed)
        if args.reuse and (out / "final" / "config.json").is_file():
            return 0
        print(f"{variant} seed {seed} ...", flush=True)
        rc = train(
            out,
            seed,
            args.eval_steps * UPDATES,
            args.model_name_or_path,
            run_flags(variant, args.max_steps, extra),
        )
        if rc != 0:
            fail(variant, seed, f"exit {rc}: {failure_reason(out)} (log: {log_path(out)})")
        return rc

    with ThreadPoolExecutor(args.jobs) as pool:
        codes = list(pool.map(job, todo))

    results: dict[str, list[dict]] = {v: [] for v in runnable}
    for (variant, seed), rc in zip(todo, codes, strict=True):
        if rc != 0:
            continue
        run_dir = out_dir / run_name(variant, seed)
        try:
            results[variant].append(collect_run(run_dir, seed))
        except Exception as e:  # a finished run we cannot read is one failure, not the end of the sweep
            fail(variant, seed, f"cannot read the finished run {run_dir}: {type(e).__name__}: {e}")
    data = {
        "command": shlex.join(["python", "-m", "studies.sweep", *argv]),
        "model": shown_path(args.model_name_or_path),
        "base_flags": BASE_FLAGS,
        "extra": extra,
        "max_steps": args.max_steps,
        "eval_steps": args.eval_steps,
        "seeds": seeds,
        "jobs": args.jobs,
        "threads": THREADS,
        "rows": summarise(results),
        "runs": {v: rs for v, rs in results.items() if rs},
        "failed": failed,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(data, indent=1))
    results = summarize(data)
    print(table(results))
    if args.docs:
        write_docs(results, data, Path(args.docs))
    if failed:
        print(f"error: {len(failed)} run(s) failed or were not run:", file=sys.stderr)
        for f in failed:
            print(f"  {f['variant']} seed {f['seed']}: {f['reason']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
