"""The tabular oracle: GRPO on a policy that is one row of logits per question, built on `tinygrpo.algorithm.core`.

Two setups from the seed tutorials (the command-line runs and plots are in `studies.bandit`):

  `train_demo`: the "demo.py" GRPO-vs-REINFORCE demo, reproduced exactly (same RNG call order, same numbers): 36
      questions a + b with a, b in 0..5 (q = a * 6 + b), 13 answers 0..12, a zero table, G = 8, one random question
      per step, SGD lr 0.08, 120 steps. GRPO: group z-score (population std, eps 1e-8), PPO clip 0.2, exact KL to
      the initial table with coefficient 0.02, the whole update skipped when every advantage is 0. REINFORCE: raw
      0/1 reward, no baseline, no clip.

  `train_chapter`: the "GRPO bandit" chapter: 3 prompts x 3 actions, N(0, 1) table, one AdamW (lr 0.1) update per
      epoch over all prompts, loss = -mean(logp * A) + 0.02 * mean exact KL to the initial table (no ratio, no clip).

The GRPO step goes through the same functions as the token-level trainer (group_advantages,
selective_log_softmax, clipped_surrogate, full_kl, aggregate_loss) on one-token "completions", so a bug in
core.py shows up here against the seed's numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor
from torch.distributions import Categorical

from tinygrpo.algorithm.core import (
    aggregate_loss,
    clipped_surrogate,
    full_kl,
    group_advantages,
    selective_log_softmax,
)
from tinygrpo.data.tasks import seed_bank

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
    """The demo's question bank: (question ids q = a * 6 + b, gold answers a + b), in the demo's order (the rows of
    the seed_bank problem set)."""
    rows = seed_bank.build_seed_bank()["train"]
    return [r["id"] for r in rows], [r["a"] + r["b"] for r in rows]


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
    # (G,): float64 statistics, float32 advantages, the demo's numpy dtype round trip
    adv, _ = group_advantages(rewards, group_size, std_correction=DEMO_STD_CORRECTION, eps=DEMO_ADV_EPS)
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
        flat = rewards.reshape(-1)  # (P*G,)
        adv, zero_std = group_advantages(
            flat, group_size, std_correction=CHAPTER_STD_CORRECTION, eps=CHAPTER_ADV_EPS
        )
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
