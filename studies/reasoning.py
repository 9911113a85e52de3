"""The reasoning experiment: does GRPO, rewarded for the final answer alone, teach a tiny model to show its work?

    python -m studies.reasoning                                # the references, then every arm, 3 seeds
    python -m studies.reasoning --eval_split validation --seeds 42 --arms mixed   # a choice, on validation
    python -m studies.reasoning --summarize                    # the table and figure of the runs there

The reference (`python train_sft.py --task multiplication_mixed`) imitated the worked product on one training
problem in four and the answer alone on the others; nothing in the prompt says which. The arms:

- `mixed`: GRPO from it with its recipe (configs/multiplication_mixed.yaml: the reward is `final_answer`, the
  integer after the last '=', and nothing else; loss `dapo`);
- `direct` (control): the same GRPO from the reference that never saw a worked product (`--task multiplication`);
- `more_sft` (control): no RL; the mixed reference's SFT run longer by as many seconds as the median `mixed` run
  trained, from scratch at the same seed (does RL do more than more imitation would?);
- `mixed_grpo`, `mixed_dr_grpo`: the `mixed` arm with the loss normalised per completion (1/|o|, GRPO's) or by a
  constant (Dr. GRPO's): Dr. GRPO's length question (arXiv 2503.20783) where the two formats differ in length.

Each GRPO run is `train_grpo.py --config configs/multiplication_mixed.yaml --seed S` at one thread, two side by
side (runs/reasoning/<arm>/seed<S>), evaluated every `eval_steps` on the split asked for (the test split by default:
for reporting; the choices were made with `--eval_split validation`). The table (docs/reasoning_table.md) and the
figures (docs/reasoning.png: held-out accuracy, the scratchpad's share of the greedy completions, their mean length,
against training minutes; docs/reasoning_length.png: the length of the right and of the wrong sampled completions,
and the share worked, step by step under each loss normaliser) come from the runs' metrics.jsonl and the SFT
control's sft_summary.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._runs import REPO, read_metrics, run_logged
from .tasks import ensure_reference

CONFIG = "configs/multiplication_mixed.yaml"
MIXED, DIRECT = "multiplication_mixed", "multiplication"  # the tasks whose references the arms start from
# GRPO arms: the task whose reference they start from, and their flags on top of the recipe.
GRPO_ARMS = {
    "mixed": (MIXED, []),
    "direct": (DIRECT, []),
    "mixed_grpo": (MIXED, ["--loss_type", "grpo"]),
    "mixed_dr_grpo": (MIXED, ["--loss_type", "dr_grpo"]),
}
ARMS = (*GRPO_ARMS, "more_sft")
# Each step's sampled statistics are logged (the first is the reference's: what it samples before any update).
LOGGING = ["--logging_steps", "1"]
FORMAT = "scratchpad"


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed{seed}"


def grpo(arm: str, seed: int, out: Path, eval_split: str, flags: list[str]) -> int:
    """One GRPO run of the experiment's recipe (one thread), from the arm's reference."""
    from tinygrpo.task import get_task

    d = run_dir(out, arm, seed)
    task, arm_flags = GRPO_ARMS[arm]
    model = get_task(task).reference["output_dir"]
    cmd = [
        sys.executable,
        "train_grpo.py",
        "--config",
        CONFIG,
        "--seed",
        str(seed),
        "--model_name_or_path",
        model,
    ]
    cmd += ["--output_dir", str(d), "--overwrite_output_dir", "true", "--torch_num_threads", "1", *LOGGING]
    cmd += ["--disable_tqdm", "true", "--save_steps", "0", "--eval_split", eval_split, *arm_flags, *flags]
    return run_logged(cmd, d)


def reference_sft() -> tuple[dict, float]:
    """The mixed reference's SFT summary and its seconds per step: the rate the more-SFT control is sized by."""
    summary = json.loads((REPO / "checkpoints" / MIXED / "sft_summary.json").read_text())
    return summary, summary["train_seconds"] / summary["steps"]


def more_sft(seed: int, out: Path, eval_split: str, seconds: float) -> int:
    """The mixed reference's recipe at `seed`, with as many more steps as `seconds` of its SFT buy (one thread)."""
    summary, per_step = reference_sft()
    steps = summary["steps"] + round(seconds / per_step)
    d = run_dir(out, "more_sft", seed)
    cmd = [sys.executable, "train_sft.py", "--task", MIXED, "--seed", str(seed), "--max_steps", str(steps)]
    cmd += ["--output_dir", str(d), "--overwrite_output_dir", "true", "--threads", "1"]
    cmd += ["--eval_split", eval_split, "--log_every", "500"]
    return run_logged(cmd, d)


def curves(d: Path) -> list[dict]:
    """A GRPO run's evaluations: step, training minutes, accuracy, the scratchpad's share, mean length."""
    rows = []
    for m in read_metrics(d):
        if "eval/accuracy" in m:
            rows.append(
                {
                    "step": m["step"],
                    "minutes": m.get("time/elapsed", 0.0) / 60,  # (the evaluation before step 1: none)
                    "accuracy": m["eval/accuracy"],
                    "share": m.get(f"eval/format/{FORMAT}", 0.0),
                    "length": m.get("eval/mean_length", float("nan")),
                    "acc_in": m.get(f"eval/format_accuracy/{FORMAT}"),
                    "sampled_share": m.get(f"completions/format/{FORMAT}"),
                }
            )
    return rows


def sampled(d: Path) -> list[dict]:
    """A GRPO run's steps as sampled (the first round, before that step's update): the scratchpad's share, the mean
    length of the right and of the wrong completions."""
    keys = {"share": f"completions/format/{FORMAT}", "right": "completions/mean_length_right"}
    keys |= {"wrong": "completions/mean_length_wrong", "reward": "reward"}
    return [
        {"step": m["step"], **{k: m.get(v) for k, v in keys.items()}}
        for m in read_metrics(d)
        if "reward" in m
    ]


def finished(out: Path, arm: str, seeds: list[int]) -> list[tuple[int, list[dict]]]:
    return [
        (s, curves(run_dir(out, arm, s))) for s in seeds if (run_dir(out, arm, s) / "summary.json").is_file()
    ]


def sft_results(out: Path, seeds: list[int]) -> list[tuple[int, dict]]:
    res = []
    for s in seeds:
        p = run_dir(out, "more_sft", s) / "sft_summary.json"
        if p.is_file():
            res.append((s, json.loads(p.read_text())))
    return res


def extra_sft_minutes(sft: list[tuple[int, dict]]) -> tuple[dict, list[float]]:
    """The reference's SFT summary, and the minutes each more-SFT run's extra steps buy at the reference's own SFT
    rate (what the control was sized by; its wall seconds depend on what else ran beside it)."""
    ref, rate = reference_sft()
    return ref, [(s["steps"] - ref["steps"]) * rate / 60 for _, s in sft]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def table(out: Path, seeds: list[int]) -> str:
    """One row per arm: before and after (median of seeds; each), the scratchpad's share, mean length, minutes."""
    head = ["arm", "start", "accuracy after (median; each)", "scratchpad share: start -> after (median)"]
    head += [
        "accuracy within the scratchpad (after)",
        "mean greedy length: start -> after",
        "minutes (median)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in GRPO_ARMS:
        runs = finished(out, arm, seeds)
        if not runs:
            continue
        first, last = [r[1][0] for r in runs], [r[1][-1] for r in runs]
        each = " / ".join(_pct(x["accuracy"]) for x in last)
        acc_in = [x["acc_in"] for x in last if x["acc_in"] is not None]
        lines.append(
            f"| `{arm}` (GRPO) | {_pct(_med([x['accuracy'] for x in first]))} | "
            f"**{_pct(_med([x['accuracy'] for x in last]))}** ({each}; seeds {', '.join(str(r[0]) for r in runs)}) | "
            f"{_pct(_med([x['share'] for x in first]))} -> **{_pct(_med([x['share'] for x in last]))}** | "
            f"{_pct(_med(acc_in)) if acc_in else 'n/a'} | {_med([x['length'] for x in first]):.1f} -> "
            f"{_med([x['length'] for x in last]):.1f} | {_med([x['minutes'] for x in last]):.1f} |"
        )
    sft = sft_results(out, seeds)
    if sft:
        ref, extra = extra_sft_minutes(sft)
        acc = [s["eval_accuracy"] for _, s in sft]
        share = [s["eval_formats"][FORMAT] for _, s in sft]
        lines.append(
            f"| `more_sft` (no RL: {sft[0][1]['steps']} SFT steps, not {ref['steps']}) | (the same recipe) | "
            f"**{_pct(_med(acc))}** ({' / '.join(_pct(a) for a in acc)}; seeds {', '.join(str(s) for s, _ in sft)}) | "
            f"-> {_pct(_med(share))} | n/a | n/a | {_med(extra):.1f} more of SFT (at the reference's rate) |"
        )
    return "\n".join(lines)


def figure(out: Path, seeds: list[int], path: Path) -> None:
    """Held-out accuracy, the scratchpad's share and the mean greedy length against training minutes: every seed
    of each GRPO arm, and the more-SFT control as points at its extra minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    keys = (("accuracy", "held-out greedy accuracy"), ("share", "share of greedy completions worked"))
    keys += (("length", "mean greedy completion length (tokens)"),)
    colours = {"mixed": "tab:green", "direct": "tab:grey"}
    for arm in ("mixed", "direct"):
        for i, (_, rows) in enumerate(finished(out, arm, seeds)):
            for ax, (k, _) in zip(axes, keys, strict=True):
                ax.plot(
                    [r["minutes"] for r in rows],
                    [r[k] for r in rows],
                    color=colours[arm],
                    alpha=0.8,
                    label=f"GRPO from the {arm} reference" if i == 0 else None,
                )
    sft = sft_results(out, seeds)
    if sft:
        xs = extra_sft_minutes(sft)[1]
        axes[0].scatter(
            xs, [s["eval_accuracy"] for _, s in sft], marker="x", color="tab:red", label="more SFT"
        )
        axes[1].scatter(xs, [s["eval_formats"][FORMAT] for _, s in sft], marker="x", color="tab:red")
    for ax, (_, title) in zip(axes, keys, strict=True):
        ax.set(title=title, xlabel="training minutes (one thread)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


SYNTAX = set("*=,+") | {"<eos>"}


def token_moves(d: Path) -> str:
    """A markdown table of what the steps did to each kind of token, over a run's logged completions (their token
    columns): the first token (the format's choice), the other digits, the work's syntax; the mean |ratio - 1| and
    the mean entropy at the token's position. '' when the run logged no token columns."""
    from tinygrpo.metrics_io import read_jsonl

    kinds: dict[str, list[tuple[float, float]]] = {"the first": [], "the other digits": [], "the syntax": []}
    rows = [r for r in read_jsonl(d / "completions.jsonl") if "tokens" in r]
    for r in rows:
        for j, (t, ratio, entropy) in enumerate(
            zip(r["tokens"], r["token_ratio"], r["token_entropy"], strict=True)
        ):
            kind = (
                "the first"
                if j == 0
                else "the other digits"
                if t.isdigit()
                else "the syntax"
                if t in SYNTAX
                else ""
            )
            if kind:
                kinds[kind].append((abs(ratio - 1), entropy))
    if not rows:
        return ""
    lines = [
        f"{len(rows)} logged completions of {d.parent.name}/{d.name}:",
        "",
        "| token | tokens | mean abs(ratio - 1) | mean entropy (nats) |",
    ]
    lines.append("|---|---|---|---|")
    for kind, vals in kinds.items():
        if vals:
            moved, ent = (statistics.fmean(v) for v in zip(*vals, strict=True))
            lines.append(f"| {kind} | {len(vals)} | {moved:.4f} | {ent:.3f} |")
    return "\n".join(lines)


LOSSES = {"mixed": "dapo", "mixed_grpo": "grpo", "mixed_dr_grpo": "dr_grpo"}
BIN = 10  # steps a point of the length figure averages (per seed; then the median over seeds)


def binned(runs: list[list[dict]], key: str) -> dict[int, float]:
    """{window: the median over runs of each run's mean `key` over the logged steps in window (step - 1) // BIN}:
    runs that log every step and runs that log every tenth are compared window by window."""
    per_run = []
    for rows in runs:
        windows: dict[int, list[float]] = {}
        for r in rows:
            if r[key] is not None:
                windows.setdefault((r["step"] - 1) // BIN, []).append(r[key])
        per_run.append({w: statistics.fmean(v) for w, v in windows.items()})
    common = set.intersection(*(set(p) for p in per_run)) if per_run else set()
    return {w: _med([p[w] for p in per_run]) for w in common}


def length_figure(out: Path, seeds: list[int], path: Path) -> bool:
    """Dr. GRPO's length question: the mean length of the right and of the wrong sampled completions, and the
    scratchpad's share of the samples, for each loss normaliser (windows of BIN steps: binned).
    False, and nothing written, unless runs of at least two normalisers have finished: a comparison needs two (a
    study of the other arms leaves the published figure alone)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    drawn = 0
    for arm, loss in LOSSES.items():
        runs = [sampled(run_dir(out, arm, s)) for s, _ in finished(out, arm, seeds)]
        if not runs:
            continue
        drawn += 1
        for ax, key in zip(axes, ("right", "wrong", "share"), strict=True):
            pts = [(w * BIN + BIN / 2, v) for w, v in sorted(binned(runs, key).items())]
            ax.plot(*zip(*pts, strict=True), label=f"{loss} ({len(runs)} seeds, median)")
    titles = ("mean length of the right completions", "mean length of the wrong completions")
    titles += ("share of the samples worked",)
    for ax, title in zip(axes, titles, strict=True):
        ax.set(title=title, xlabel=f"step (windows of {BIN}; median of the seeds' means)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("tokens (sampled, EOS included)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    if drawn >= 2:
        fig.savefig(path, dpi=90)
    plt.close(fig)
    return drawn >= 2


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--seeds", nargs="+", type=int, default=[42, 1, 2])
    p.add_argument("--eval_split", default="test", help="test (reporting) or validation (choices)")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "reasoning")
    p.add_argument("--parallel", type=int, default=2, help="runs side by side (one thread each; default 2)")
    p.add_argument(
        "--summarize", action="store_true", help="only write the table and figure of the runs there"
    )
    p.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="where reasoning_table.md and the figures go (default: docs/ for the test split; beside the runs, "
        "in --out, for a choice on validation, so that it never overwrites the published ones)",
    )
    p.add_argument("flags", nargs="*", help="after --: more train_grpo.py flags for the GRPO arms")
    args = p.parse_args(argv)
    if args.docs is None:
        args.docs = REPO / "docs" if args.eval_split == "test" else args.out
    if not args.summarize:
        for task in {GRPO_ARMS[a][0] for a in args.arms if a in GRPO_ARMS} | {MIXED}:
            ensure_reference(task)
        # First the mixed and direct arms; then the more-SFT control (it needs the mixed runs' seconds) beside the
        # other GRPO arms, two jobs at a time throughout.
        first = [("grpo", a, s) for a in ("mixed", "direct") if a in args.arms for s in args.seeds]
        later = [("sft", "more_sft", s) for s in args.seeds if "more_sft" in args.arms]
        later += [
            ("grpo", a, s)
            for a in GRPO_ARMS
            if a in args.arms and a not in ("mixed", "direct")
            for s in args.seeds
        ]
        with ThreadPoolExecutor(args.parallel) as pool:
            codes = list(pool.map(lambda j: grpo(*j[1:], args.out, args.eval_split, args.flags), first))
        seconds = None
        if later and later[0][0] == "sft":
            mixed = finished(args.out, "mixed", args.seeds)
            if not mixed:
                sys.exit("error: the more_sft control needs finished runs of the mixed arm (its seconds)")
            seconds = 60 * _med([rows[-1]["minutes"] for _, rows in mixed])

        def job(j: tuple[str, str, int]) -> int:
            kind, arm, seed = j
            if kind == "sft":
                return more_sft(seed, args.out, args.eval_split, seconds)
            return grpo(arm, seed, args.out, args.eval_split, args.flags)

        with ThreadPoolExecutor(args.parallel) as pool:
            codes += list(pool.map(job, later))
        if any(codes):
            print(f"some runs failed (see the logs under {args.out})", file=sys.stderr)
    text = table(args.out, args.seeds)
    moves = token_moves(run_dir(args.out, "mixed", args.seeds[0]))
    text += f"\n\n{moves}" if moves else ""
    print(text)
    args.docs.mkdir(parents=True, exist_ok=True)
    (args.docs / "reasoning_table.md").write_text(text + "\n")
    figure(args.out, args.seeds, args.docs / "reasoning.png")
    length_figure(args.out, args.seeds, args.docs / "reasoning_length.png")


if __name__ == "__main__":
    main()
