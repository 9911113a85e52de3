"""metrics.jsonl / completions.jsonl writing and the end-of-run plots."""

from __future__ import annotations

import json
from pathlib import Path

TIMING_PREFIXES = ("time/", "throughput/")  # the only keys that may differ between identical runs


class JsonlWriter:
    """Appends one JSON object per line, flushed at once (a killed run keeps every line it wrote)."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path = Path(path)
        self.enabled = enabled

    def write(self, obj: dict) -> None:
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(json.dumps(obj, sort_keys=True) + "\n")


def truncate_after_step(path: Path, step: int) -> None:
    """Drop lines logged after `step` (on resume, those steps are about to be redone)."""
    path = Path(path)
    if not path.is_file():
        return
    kept = [
        line for line in path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= step
    ]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)


def read_jsonl(path: Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def plot_metrics(metrics_path: Path, out_path: Path) -> list[str]:
    """Six panels from metrics.jsonl: reward; held-out accuracy (and by problem kind); KL to the reference (or, when
    there is none, the policy's entropy); zero-variance groups and the sampled completions that carried signal;
    training prompts by their latest group; held-out accuracy by problem kind, first evaluation against last."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(metrics_path)
    has_kl = any("kl" in r for r in rows)
    kinds = sorted({k for r in rows for k in r if k.startswith("eval/accuracy/")})
    panels = [
        ("reward", "sampled reward (mean)", ["reward"]),
        ("eval/accuracy", "held-out greedy accuracy", ["eval/accuracy", *kinds]),
        ("kl", "KL to reference (mean per token)", ["kl"])
        if has_kl
        else ("entropy", "policy entropy (nats per token)", ["entropy"]),
        (
            "frac_reward_zero_std",
            "zero-variance groups; samples with signal",
            ["frac_reward_zero_std", "frac_completions_with_signal"],
        ),
        (
            "prompts/unsolved",
            "training prompts, by their latest group",
            ["prompts/unsolved", "prompts/partly_solved", "prompts/unseen"],
        ),
        ("kinds", "held-out accuracy by problem kind", []),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7))
    for ax, (key, title, keys) in zip(axes.flat, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if key == "kinds":
            evals = [r for r in rows if any(k in r for k in kinds)]
            if not evals:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
                continue
            names = [k.split("/")[-1] for k in kinds]
            x = range(len(kinds))
            for j, (r, label) in enumerate(((evals[0], "first"), (evals[-1], "last"))):
                ax.bar(
                    [i + (j - 0.5) * 0.4 for i in x],
                    [r.get(k, 0) for k in kinds],
                    width=0.4,
                    label=f"{label} (step {r['step']})",
                )
            ax.set_xticks(list(x), names, fontsize=8)
            ax.set_ylim(0, 1)
            ax.legend(fontsize=8)
            continue
        drawn = False
        for k in keys:
            pts = [(r["step"], r[k]) for r in rows if k in r]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=k.split("/")[-1])
                drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        elif len(keys) > 1:
            ax.legend(fontsize=7)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return [key for key, _, _ in panels]
