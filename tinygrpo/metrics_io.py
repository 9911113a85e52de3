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
    """Four panels from metrics.jsonl: reward, held-out accuracy, KL to the reference (or, when there is none,
    the policy's entropy), fraction of zero-variance groups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(metrics_path)
    has_kl = any("kl" in r for r in rows)
    panels = [
        ("reward", "sampled reward (mean)"),
        ("eval/accuracy", "held-out greedy accuracy"),
        ("kl", "KL to reference (mean per token)")
        if has_kl
        else ("entropy", "policy entropy (nats per token)"),
        ("frac_reward_zero_std", "fraction of zero-variance groups"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, (key, title) in zip(axes, panels, strict=True):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return [key for key, _ in panels]
