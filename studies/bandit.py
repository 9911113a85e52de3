"""The seed tutorials' tabular runs from the command line, with their outputs and plots.

python -m studies.bandit demo [--steps 120] [--output_dir runs/bandit_demo]
    The seed demo, GRPO vs REINFORCE on 36 a+b questions (`tinygrpo.oracles.bandit.train_demo`); writes config.json,
    metrics.jsonl, summary.json and bandit_demo.png (accuracy; GRPO's cumulative skipped fraction).

python -m studies.bandit chapter --epochs 40 --group-size 4 [--output_dir runs/bandit_chapter] [--seed 42]
    The "GRPO bandit" chapter, 3 prompts x 3 actions (`tinygrpo.oracles.bandit.train_chapter`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from tinygrpo.oracles.bandit import (
    CHAPTER_ACTIONS,
    CHAPTER_ADV_EPS,
    CHAPTER_KL_COEF,
    CHAPTER_LR,
    CHAPTER_PROMPTS,
    CHAPTER_STD_CORRECTION,
    CHAPTER_TARGETS,
    DEMO_ADV_EPS,
    DEMO_CLIP_EPS,
    DEMO_GROUP,
    DEMO_KL_BETA,
    DEMO_LR,
    DEMO_SEEDS,
    DEMO_STD_CORRECTION,
    DEMO_STEPS,
    N_ANSWERS,
    N_QUESTIONS,
    format_chapter_policy,
    run_demo,
    train_chapter,
)


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def _write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def plot_demo(reinforce: dict, grpo: dict, path: Path) -> None:
    """Two panels: greedy accuracy per step (REINFORCE vs GRPO); GRPO's cumulative skipped fraction."""
    import matplotlib

    matplotlib.use("Agg")  # headless; set before pyplot is imported
    import matplotlib.pyplot as plt

    fig, (ax_acc, ax_skip) = plt.subplots(1, 2, figsize=(10, 3.8))
    steps = range(1, len(grpo["acc"]) + 1)
    ax_acc.plot(range(1, len(reinforce["acc"]) + 1), reinforce["acc"], label="REINFORCE (raw 0/1)")
    ax_acc.plot(steps, grpo["acc"], label="GRPO (group z-score + clip + KL)")
    ax_acc.set(xlabel="step", ylabel="greedy accuracy (36 questions)", title="accuracy", ylim=(0, 1))
    ax_acc.legend()
    ax_skip.plot(steps, grpo["skip_frac"], color="C1")
    ax_skip.set(
        xlabel="step", ylabel="skipped / (step + 1)", title="GRPO: zero-variance groups skipped", ylim=(0, 1)
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_demo(steps: int, output_dir: Path, log: Callable[[str], None] = print) -> dict:
    output_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "command": "demo",
        "steps": steps,
        "n_questions": N_QUESTIONS,
        "n_answers": N_ANSWERS,
        "group_size": DEMO_GROUP,
        "clip_eps": DEMO_CLIP_EPS,
        "kl_beta": DEMO_KL_BETA,
        "kl": "exact categorical KL(pi || initial table)",
        "optimizer": "SGD",
        "lr": DEMO_LR,
        "seeds": DEMO_SEEDS,
        "advantage": {"std_correction": DEMO_STD_CORRECTION, "eps": DEMO_ADV_EPS},
    }
    _write_json(output_dir / "config.json", config)
    runs = {kind: run_demo(kind, steps=steps, log=log) for kind in ("reinforce", "grpo")}
    rows = [
        {
            "kind": kind,
            "step": s + 1,
            "acc": h["acc"][s],
            "skipped": h["skipped"][s],
            "skip_frac": h["skip_frac"][s],
            "mean_reward": h["mean_reward"][s],
        }
        for kind, h in runs.items()
        for s in range(steps)
    ]
    _write_jsonl(output_dir / "metrics.jsonl", rows)
    summary = {
        kind: {"seed": h["seed"], "final_acc": h["final_acc"], "num_skipped": h["num_skipped"]}
        for kind, h in runs.items()
    }
    _write_json(output_dir / "summary.json", summary)
    plot_demo(runs["reinforce"], runs["grpo"], output_dir / "bandit_demo.png")
    log(
        f"final greedy accuracy: reinforce={runs['reinforce']['final_acc']:.3f}  grpo={runs['grpo']['final_acc']:.3f}"
    )
    log(f"grpo skipped {runs['grpo']['num_skipped']}/{steps} steps (zero-variance groups)")
    return summary


def main_chapter(
    epochs: int, group_size: int, seed: int, output_dir: Path, log: Callable[[str], None] = print
) -> dict:
    output_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "command": "chapter",
        "epochs": epochs,
        "group_size": group_size,
        "seed": seed,
        "prompts": list(CHAPTER_PROMPTS),
        "actions": list(CHAPTER_ACTIONS),
        "targets": list(CHAPTER_TARGETS),
        "init": "N(0, 1) after torch.manual_seed(seed)",
        "optimizer": "AdamW (torch defaults, weight_decay 0.01)",
        "lr": CHAPTER_LR,
        "kl_coef": CHAPTER_KL_COEF,
        "advantage": {"std_correction": CHAPTER_STD_CORRECTION, "eps": CHAPTER_ADV_EPS},
        "reported_after_update": ["greedy_reward", "mean_kl", "target_prob"],
    }
    _write_json(output_dir / "config.json", config)
    policy, hist = train_chapter(epochs, group_size, seed, log=log)
    _write_jsonl(output_dir / "metrics.jsonl", hist["epochs"])
    summary = {k: v for k, v in hist.items() if k != "epochs"}
    _write_json(output_dir / "summary.json", summary)
    log("")
    for line in format_chapter_policy(policy):
        log(line)
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m studies.bandit", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the seed demo: GRPO vs REINFORCE on 36 a+b questions")
    demo.add_argument("--steps", type=int, default=DEMO_STEPS)
    demo.add_argument("--output_dir", "--output-dir", type=Path, default=Path("runs/bandit_demo"))
    chapter = sub.add_parser("chapter", help="the chapter's 3-prompt x 3-action GRPO bandit")
    chapter.add_argument("--epochs", type=int, default=40)
    chapter.add_argument("--group-size", type=int, default=4)
    chapter.add_argument("--seed", type=int, default=42)
    chapter.add_argument("--output_dir", "--output-dir", type=Path, default=Path("runs/bandit_chapter"))
    return parser


def main(argv: Sequence[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return main_demo(args.steps, args.output_dir)
    return main_chapter(args.epochs, args.group_size, args.seed, args.output_dir)


if __name__ == "__main__":
    main()
