"""The comparison's figures: accuracy and zero-variance fraction against completions, and the belief heatmaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinygrpo.oracles import bandit

from .settings import METHODS, N_ANSWERS, N_QUESTIONS


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PANELS = (
    ("table", None, "table (seed demo), zero init"),
    ("gpt", "format_only", "char GPT, format-only SFT start"),
    ("gpt", "imperfect", "char GPT, imperfect SFT start"),
)
STYLE = {"grpo": ("C0", "GRPO"), "reinforce": ("C3", "REINFORCE")}


def _panel_methods(family: str, ref: str | None) -> list[str]:
    return [k for k, (f, _, r, _) in METHODS.items() if f == family and r == ref]


def plot_curves(results: dict, key: str, ylabel: str, path: Path, title: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    for ax, (family, ref, panel_title) in zip(axes, PANELS, strict=True):
        for method in _panel_methods(family, ref):
            runs = results["methods"][method]["runs"]
            first = 0 if key == "acc" else 1  # no zero-variance fraction before the first group
            x = np.asarray(runs[0]["x"][first:])
            ys = np.asarray([r[key][first:] for r in runs])  # (seeds, points)
            color, name = STYLE[METHODS[method][1]]
            ax.plot(x, ys.mean(0), color=color, lw=2, label=f"{name} (mean of {len(runs)} seeds)")
            ax.fill_between(x, ys.min(0), ys.max(0), color=color, alpha=0.2, lw=0, label=f"{name} min-max")
        if key == "acc":
            ax.axhline(0.9, color="gray", ls=":", lw=1)
        ax.set(title=panel_title, xlabel="completions sampled", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right" if key == "acc" else "upper left", fontsize=8)
    axes[0].set_ylabel(ylabel)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_beliefs(table_b: dict, gpt_b: dict, path: Path, table_seed: int, gpt_seed: int) -> None:
    plt = _plt()
    _, gold = bandit.build_seed_bank()
    fig, axes = plt.subplots(2, 3, figsize=(12, 13), sharex=True, sharey=True)
    rows = (
        (table_b, f"table GRPO, zero init (seed {table_seed})"),
        (gpt_b, f"char GPT GRPO, format-only start (seed {gpt_seed})"),
    )
    qlabels = [f"{a}+{b}" for a in range(bandit.N_A) for b in range(bandit.N_B)]
    im = None
    for r, (b, name) in enumerate(rows):
        for c, stage in enumerate(("start", "midway", "end")):
            ax = axes[r, c]
            p = np.asarray(b[("start", "mid", "end")[c]], dtype=np.float64)
            im = ax.imshow(p, cmap="viridis", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
            ax.scatter(
                gold, range(N_QUESTIONS), marker="o", s=14, facecolors="none", edgecolors="red", lw=0.8
            )
            ax.set_title(
                f"{stage}: {b['x'][c]:,} completions\nmass on answers 0..12: {p.sum(1).mean():.2f}",
                fontsize=9,
            )
            ax.set_xticks(range(N_ANSWERS), [str(k) for k in range(N_ANSWERS)], fontsize=7)
            ax.set_yticks(range(N_QUESTIONS), qlabels, fontsize=6)
            if c == 0:
                ax.set_ylabel(f"{name}\n\nquestion", fontsize=10)
            if r == 1:
                ax.set_xlabel("answer k (red circle: correct a+b)")
    fig.colorbar(
        im, ax=axes, shrink=0.5, label='P(answer k)   (char GPT: P("k<eos>") = product of its token probs)'
    )
    fig.suptitle("Beliefs over the 13 answers for the 36 questions (top: table; bottom: char GPT)")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------------
# the report
