"""The tabular oracle: GRPO on a policy that is one row of logits per question, built on `tinygrpo.core`.

Two setups from the seed tutorials, each a sub-command writing config.json, metrics.jsonl and summary.json:

  python -m tinygrpo.bandit demo [--steps 120] [--output-dir runs/bandit_demo]
      The "demo.py" GRPO-vs-REINFORCE demo, reproduced exactly (same RNG call order, same numbers): 36 questions
      a + b with a, b in 0..5 (q = a * 6 + b), 13 answers 0..12, a zero table, G = 8, one random question per
      step, SGD lr 0.08, 120 steps. GRPO: group z-score (population std, eps 1e-8), PPO clip 0.2, exact KL to the
      initial table with coefficient 0.02, the whole update skipped when every advantage is 0. REINFORCE: raw 0/1
      reward, no baseline, no clip. Also writes bandit_demo.png (accuracy; GRPO's cumulative skipped fraction).

  python -m tinygrpo.bandit chapter --epochs 40 --group-size 4 [--output-dir runs/bandit_chapter] [--seed 42]
      The "GRPO bandit" chapter: 3 prompts x 3 actions, N(0, 1) table, one AdamW (lr 0.1) update per epoch over
      all prompts, loss = -mean(logp * A) + 0.02 * mean exact KL to the initial table (no ratio, no clip).

The GRPO step goes through the same functions as the token-level trainer (group_advantages,
selective_log_softmax, clipped_surrogate, full_kl, aggregate_loss) on one-token "completions", so a bug in
core.py shows up here against the seed's numbers.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor
from torch.distributions import Categorical

from tinygrpo.core import (
    aggregate_loss,
    clipped_surrogate,
    full_kl,
    group_advantages,
    selective_log_softmax,
)

# ---- the seed demo's constants (000: demo.py) ----
N_A, N_B = 6, 6
N_ANSWERS = N_A + N_B + 1  # 0 .. 12: exactly the possible sums, no out-of-range distractors
N_QUESTIONS = N_A * N_B  # 36
DEMO_GROUP = 8
DEMO_CLIP_EPS = 0.2
DEMO_KL_BETA = 0.02
DEMO_LR = 0.08
DEMO_STEPS = 120
DEMO_SEEDS = {"grpo": 42, "reinforce": 42 + 7}  # the demo offsets the seed per kind
DEMO_KINDS = ("grpo", "reinforce")
# the demo's group_advantages: numpy r.std() (population) and (std + 1e-8)
DEMO_STD_CORRECTION = 0
DEMO_ADV_EPS = 1e-8

# ---- the chapter's setup (002: GRPO bandit) ----
CHAPTER_PROMPTS = ("2+2?", "capital of france?", "first letter of abc?")
CHAPTER_ACTIONS = ("4", "paris", "a")
CHAPTER_TARGETS = ("4", "paris", "a")
CHAPTER_LR = 0.1
CHAPTER_KL_COEF = 0.02
# The chapter only says "(reward - group_mean) / group_std" plus "a small epsilon". We take torch's Tensor.std()
# default (unbiased), which is what `(r - r.mean()) / (r.std() + eps)` in a torch tutorial computes, and eps 1e-6.
CHAPTER_STD_CORRECTION = 1
CHAPTER_ADV_EPS = 1e-6


def build_seed_bank() -> tuple[list[int], list[int]]:
    """The demo's question bank: (question ids q = a * 6 + b, gold answers a + b), in the demo's order."""
    qs, gold = [], []
    for a in range(N_A):
        for b in range(N_B):
            qs.append(a * N_B + b)
            gold.append(a + b)
    return qs, gold


class TablePolicy(nn.Module):
    """A "tiny LLM" with the representation learning stripped off: one row of answer logits per question."""

    def __init__(self, n_questions: int, n_answers: int, init: Tensor | None = None) -> None:
        super().__init__()
        if n_questions < 1 or n_answers < 2:
            raise ValueError(f"need n_questions >= 1 and n_answers >= 2, got ({n_questions}, {n_answers})")
        if init is None:
            init = torch.zeros(n_questions, n_answers)  # uniform over answers, as in the demo
        elif init.shape != (n_questions, n_answers):
            raise ValueError(f"init must have shape ({n_questions}, {n_answers}), got {tuple(init.shape)}")
        self.logits = nn.Parameter(init.detach().clone().float())  # (Q, A)

    def forward(self, q: int | Tensor) -> Tensor:
        return self.logits[q]  # (A,) for an int, (..., A) for an index tensor

    def dist(self, q: int | Tensor) -> Categorical:
        return Categorical(logits=self.logits[q])

    @torch.no_grad()
    def greedy(self) -> Tensor:
        return self.logits.argmax(dim=-1)  # (Q,) first maximum on ties, like the demo's argmax


def greedy_accuracy(policy: TablePolicy, gold: Sequence[int]) -> float:
    """Fraction of questions whose most likely answer is the gold one (k / n as a Python float)."""
    correct = (policy.greedy() == torch.as_tensor(list(gold))).sum().item()
    return correct / len(gold)


def _sample_one_at_a_time(dist: Categorical, n: int) -> list[int]:
    # One .sample() call per answer, as the demo does: the torch RNG stream (and so every later step) depends
    # on this call pattern, and the exact reproduction depends on it.
    return [int(dist.sample().item()) for _ in range(n)]


# ----------------------------------------------------------------------------------------------------------------
# the demo's two update rules


def grpo_step(
    policy: TablePolicy,
    opt: torch.optim.Optimizer,
    q: int,
    gold: int,
    ref_logits: Tensor,
    *,
    group_size: int = DEMO_GROUP,
    epsilon: float = DEMO_CLIP_EPS,
    beta: float = DEMO_KL_BETA,
) -> tuple[float, bool]:
    """One GRPO update on question q. Returns (mean reward of the group, skipped).

    Sample G answers from the detached (old) policy, reward 1 for the gold answer, group z-score advantages; if
    every advantage is 0 (all right or all wrong) skip the update, KL term included, as the demo does. Else
    loss = clipped surrogate (mean over the G one-token completions) + beta * exact KL(pi(q) || ref(q)).
    """
    old_row = policy.logits[q].detach()  # (A,)
    answers = _sample_one_at_a_time(Categorical(logits=old_row), group_size)
    rewards = torch.tensor([1.0 if a == gold else 0.0 for a in answers], dtype=torch.float64)  # (G,)
    mean_reward = float(rewards.mean())
    # float64 statistics, float32 advantages: the demo's numpy dtype round trip
    adv, _ = group_advantages(
        rewards, group_size, std_correction=DEMO_STD_CORRECTION, eps=DEMO_ADV_EPS
    )  # (G,)
    if torch.allclose(adv, torch.zeros_like(adv)):  # the demo's np.allclose(adv, 0)
        return mean_reward, True

    n_answers = policy.logits.shape[1]
    index = torch.tensor(answers).view(group_size, 1)  # (G, 1): G completions of one token
    mask = torch.ones(group_size, 1, dtype=torch.bool)  # (G, 1)
    logp = selective_log_softmax(policy.logits[q].expand(group_size, 1, n_answers), index)  # (G, 1)
    old_logp = selective_log_softmax(old_row.expand(group_size, 1, n_answers), index)  # (G, 1)
    per_token, _ = clipped_surrogate(logp, old_logp, adv.float(), mask, epsilon_low=epsilon)  # (G, 1)
    kl = full_kl(policy.logits[q], ref_logits[q])  # () the exact categorical KL, no sampling
    loss = aggregate_loss(per_token, mask, "grpo") + beta * kl
    opt.zero_grad()
    loss.backward()
    opt.step()
    return mean_reward, False


def reinforce_step(
    policy: TablePolicy, opt: torch.optim.Optimizer, q: int, gold: int, *, group_size: int = DEMO_GROUP
) -> float:
    """One REINFORCE update: raw 0/1 reward, no baseline, no clip, never skipped. Returns the mean reward.

    Samples come from the current (non-detached) distribution, as in the demo: classic on-policy REINFORCE,
    loss = -(sum_i log pi(a_i) * r_i) / G.
    """
    row = policy.logits[q]  # (A,)
    answers = _sample_one_at_a_time(Categorical(logits=row), group_size)
    rewards = torch.tensor([1.0 if a == gold else 0.0 for a in answers])  # (G,)
    adv, _ = group_advantages(rewards, group_size, mode="reinforce")  # (G,) = the raw rewards
    logp = selective_log_softmax(row.expand(group_size, -1), torch.tensor(answers))  # (G,)
    loss = -(logp * adv).sum() / group_size
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(rewards.mean())


def train_demo(
    kind: str,
    seed: int | None = None,
    steps: int = DEMO_STEPS,
    *,
    group_size: int = DEMO_GROUP,
    lr: float = DEMO_LR,
    epsilon: float = DEMO_CLIP_EPS,
    beta: float = DEMO_KL_BETA,
    log: Callable[[str], None] | None = None,
) -> tuple[TablePolicy, dict]:
    """Train one demo run from scratch; returns (policy, history). seed None -> the demo's (42 GRPO, 49 REINFORCE).

    history: kind, seed, steps, "acc" (greedy accuracy after each step), "skipped" (per step, bool),
    "skip_frac" (cumulative skipped / (step + 1)), "mean_reward" (per step), "num_skipped", "final_acc".
    """
    if kind not in DEMO_KINDS:
        raise ValueError(f"kind must be one of {DEMO_KINDS}, got {kind!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps!r}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size!r}")
    if seed is None:
        seed = DEMO_SEEDS[kind]
    np.random.seed(seed)
    torch.manual_seed(seed)
    qs, gold = build_seed_bank()
    policy = TablePolicy(N_QUESTIONS, N_ANSWERS)
    ref_logits = policy.logits.detach().clone()  # frozen reference: the initial (uniform) table
    opt = torch.optim.SGD(policy.parameters(), lr=lr)

    hist: dict = {"kind": kind, "seed": seed, "steps": steps, "acc": [], "skipped": [], "skip_frac": []}
    hist["mean_reward"] = []
    n_skipped = 0
    for step in range(steps):
        i = int(np.random.randint(0, len(qs)))  # numpy draws the question, torch the answers: two streams
        if kind == "grpo":
            mean_reward, skipped = grpo_step(
                policy, opt, qs[i], gold[i], ref_logits, group_size=group_size, epsilon=epsilon, beta=beta
            )
        else:
            mean_reward, skipped = reinforce_step(policy, opt, qs[i], gold[i], group_size=group_size), False
        n_skipped += int(skipped)
        hist["acc"].append(greedy_accuracy(policy, gold))
        hist["skipped"].append(skipped)
        hist["skip_frac"].append(n_skipped / (step + 1))
        hist["mean_reward"].append(mean_reward)
        if log is not None and (step + 1) % 20 == 0:
            log(
                f"[{kind}] step {step + 1:3d}  acc={hist['acc'][-1]:.3f}  skip_frac={hist['skip_frac'][-1]:.3f}"
            )
    hist["num_skipped"] = n_skipped
    hist["final_acc"] = hist["acc"][-1]
    return policy, hist


def run_demo(kind: str, seed: int | None = None, steps: int = DEMO_STEPS, **kwargs) -> dict:
    """`train_demo` without the policy: the per-step history (acc, skipped, skip_frac, ...) for comparisons."""
    return train_demo(kind, seed, steps, **kwargs)[1]


# ----------------------------------------------------------------------------------------------------------------
# the chapter's bandit


def chapter_rewards(actions: Tensor, n_prompts: int) -> Tensor:
    """Rule reward: 1.0 if the action is the prompt's target. actions (P, G) long -> (P, G) float."""
    targets = torch.tensor([CHAPTER_ACTIONS.index(t) for t in CHAPTER_TARGETS[:n_prompts]])  # (P,)
    return (actions == targets.unsqueeze(-1)).float()


def train_chapter(
    epochs: int = 40,
    group_size: int = 4,
    seed: int = 42,
    *,
    lr: float = CHAPTER_LR,
    kl_coef: float = CHAPTER_KL_COEF,
    log: Callable[[str], None] | None = None,
) -> tuple[TablePolicy, dict]:
    """The chapter's GRPO-inspired bandit: returns (policy, history).

    Per epoch: G actions per prompt from the current policy, reward 1 for the target, group-relative advantage
    (unbiased group std + 1e-6, zero for all-equal groups), loss = -mean(logp * A) + kl_coef * (exact KL to the
    initial table, averaged over the samples), one AdamW step (torch defaults besides lr: weight_decay 0.01).
    Reported per epoch: mean_reward of the samples, adv_mean/adv_std (population) of the advantages, and
    greedy_reward / mean_kl of the policy AFTER the update (before it the KL of epoch 1 is trivially 0).
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs!r}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size!r}")
    n_prompts, n_actions = len(CHAPTER_PROMPTS), len(CHAPTER_ACTIONS)
    torch.manual_seed(seed)
    policy = TablePolicy(n_prompts, n_actions, init=torch.randn(n_prompts, n_actions))
    ref_logits = policy.logits.detach().clone()  # (P, A)
    opt = torch.optim.AdamW(policy.parameters(), lr=lr)

    def greedy_reward() -> float:
        return float(chapter_rewards(policy.greedy().unsqueeze(-1), n_prompts).mean())

    def mean_kl() -> float:
        with torch.no_grad():
            return float(full_kl(policy.logits, ref_logits).mean())

    hist: dict = {"initial_greedy_reward": greedy_reward(), "epochs": []}
    if log is not None:
        log(f"prompts={n_prompts} actions={n_actions} group_size={group_size}")
    for epoch in range(1, epochs + 1):
        with torch.no_grad():
            actions = Categorical(logits=policy.logits).sample((group_size,)).T  # (P, G)
        rewards = chapter_rewards(actions, n_prompts)  # (P, G)
        adv, zero_std = group_advantages(
            rewards.reshape(-1), group_size, std_correction=CHAPTER_STD_CORRECTION, eps=CHAPTER_ADV_EPS
        )  # (P*G,)
        logits = policy.logits.repeat_interleave(group_size, dim=0)  # (P*G, A): row k is prompt k // G
        logp = selective_log_softmax(logits, actions.reshape(-1))  # (P*G,)
        pg_loss = -(logp * adv).mean()
        kl = full_kl(policy.logits, ref_logits)  # (P,) every prompt has G samples: sample mean = prompt mean
        loss = pg_loss + kl_coef * kl.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

        row = {
            "epoch": epoch,
            "mean_reward": float(rewards.mean()),
            "greedy_reward": greedy_reward(),
            "adv_mean": float(adv.mean()),
            "adv_std": float(adv.std(correction=0)),
            "mean_kl": mean_kl(),
            "kl_in_loss": kl.mean().item(),
            "loss": loss.item(),
            "zero_std_frac": float(zero_std.float().mean()),
            "target_prob": target_probs(policy),
        }
        hist["epochs"].append(row)
        if log is not None:
            log(
                f"epoch={epoch:03d} mean_reward={row['mean_reward']:.4f} greedy_reward={row['greedy_reward']:.4f} "
                f"adv_mean={row['adv_mean']:.4f} adv_std={row['adv_std']:.4f} mean_kl={row['mean_kl']:.4f}"
            )
    hist["final_greedy_reward"] = hist["epochs"][-1]["greedy_reward"]
    hist["final_mean_kl"] = hist["epochs"][-1]["mean_kl"]
    hist["final_target_prob"] = hist["epochs"][-1]["target_prob"]
    return policy, hist


def target_probs(policy: TablePolicy) -> list[float]:
    """Probability of each chapter prompt's target action under the policy."""
    with torch.no_grad():
        probs = policy.logits.softmax(-1)  # (P, A)
    return [float(probs[p, CHAPTER_ACTIONS.index(t)]) for p, t in enumerate(CHAPTER_TARGETS)]


def run_chapter(epochs: int = 40, group_size: int = 4, seed: int = 42, **kwargs) -> dict:
    """`train_chapter` without the policy: the per-epoch history."""
    return train_chapter(epochs, group_size, seed, **kwargs)[1]


def format_chapter_policy(policy: TablePolicy) -> list[str]:
    """The chapter's closing `policy` block: greedy action per prompt, with the action probabilities."""
    with torch.no_grad():
        probs = policy.logits.softmax(-1)  # (P, A)
    lines = ["policy"]
    for p, prompt in enumerate(CHAPTER_PROMPTS):
        action = CHAPTER_ACTIONS[int(probs[p].argmax())]
        dist = " ".join(f"p({a})={float(probs[p, k]):.4f}" for k, a in enumerate(CHAPTER_ACTIONS))
        lines.append(f"prompt={prompt!r} action={action!r} target={CHAPTER_TARGETS[p]!r} {dist}")
    return lines


# ----------------------------------------------------------------------------------------------------------------
# CLI


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
    parser = argparse.ArgumentParser(prog="python -m tinygrpo.bandit", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the seed demo: GRPO vs REINFORCE on 36 a+b questions")
    demo.add_argument("--steps", type=int, default=DEMO_STEPS)
    demo.add_argument("--output-dir", type=Path, default=Path("runs/bandit_demo"))
    chapter = sub.add_parser("chapter", help="the chapter's 3-prompt x 3-action GRPO bandit")
    chapter.add_argument("--epochs", type=int, default=40)
    chapter.add_argument("--group-size", type=int, default=4)
    chapter.add_argument("--seed", type=int, default=42)
    chapter.add_argument("--output-dir", type=Path, default=Path("runs/bandit_chapter"))
    return parser


def main(argv: Sequence[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return main_demo(args.steps, args.output_dir)
    return main_chapter(args.epochs, args.group_size, args.seed, args.output_dir)


if __name__ == "__main__":
    main()
