"""The GPU goals, read from what benchmarks/gpu.sh measured in OUT (its last step runs this):

    python benchmarks/gpu_goals.py runs/gpu

For our default run (static shapes, eager) and the same with --cuda_graphs true, each from time_to_accuracy.py with
TRL beside it on the same GPU (medians over the seeds run): training seconds of the whole run (1000 steps), the
first held-out evaluation at or above 90 % and 99 % (training seconds, evaluations off the clock), and TRL's
seconds to 90 % over ours. Against the goals: 1000 steps in at most 15 s, 99 % within 10 s, 15x TRL to 90 %.
Then the step split of each of our runs there (median ms of metrics.jsonl's time/* from step 10 on: the first
steps capture the graphs). Prints two Markdown tables and writes OUT/goals.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

# (what is read, the goal, whether a figure at or below the goal meets it)
GOALS = {"1000 steps s": (15.0, True), "to 99 % s": (10.0, True), "TRL to 90 % / ours": (15.0, False)}
# OUT's results files of time_to_accuracy.py, by the name of our run in them
RUNS = {"default": "time_to_accuracy_results.json", "cuda_graphs": "time_to_accuracy_graphs_results.json"}
# our runs in OUT whose steps are split, by the glob of their run directories
SPLIT_RUNS = {
    "default experiment": "default",
    "default experiment, --static_shapes false": "default_eager",
    "default": "time_to_accuracy/ours_default_s*",
    "cuda_graphs": "time_to_accuracy_graphs/ours_default_s*",
}
PARTS = ("step", "generate", "reward", "ref_old_logps", "optimize")


def _peer(path: Path, name: str) -> dict | None:
    if not path.is_file():
        return None
    return next((p for p in json.loads(path.read_text())["peers"] if p["peer"] == name), None)


def goals(out: Path) -> dict:
    """Each run's three figures (None where not measured or not reached) and whether each meets its goal."""
    trl = _peer(out / RUNS["default"], "trl")
    trl_90 = trl["first_s"].get("0.9") if trl else None
    rows = {}
    for run, file in RUNS.items():
        ours = _peer(out / file, "ours_default")
        if ours is None:
            continue
        to_90 = ours["first_s"].get("0.9")
        figures = {
            "1000 steps s": statistics.median(r["train_s"] for r in ours["runs"]),
            "to 99 % s": ours["first_s"].get("0.99"),
            "TRL to 90 % / ours": trl_90 / to_90 if trl_90 and to_90 else None,
        }
        met = {
            k: None if v is None else (v <= GOALS[k][0] if GOALS[k][1] else v >= GOALS[k][0])
            for k, v in figures.items()
        }
        rows[run] = {"figures": figures, "met": met, "seeds": len(ours["runs"])}
    return {"trl_to_90_s": trl_90, "goals": {k: g for k, (g, _) in GOALS.items()}, "runs": rows}


def step_split(out: Path) -> dict[str, dict[str, float]]:
    """Each run's median ms a step, per part (PARTS), from step 10 on (over its seeds' steps together)."""
    split = {}
    for name, pattern in SPLIT_RUNS.items():
        rows = [
            json.loads(line)
            for path in sorted(out.glob(f"{pattern}/metrics.jsonl"))
            for line in path.read_text().splitlines()
            if line.strip()
        ]
        rows = [r for r in rows if "time/step" in r and r.get("step", 0) >= 10]
        if rows:
            split[name] = {p: 1000 * statistics.median(r.get(f"time/{p}", 0.0) for r in rows) for p in PARTS}
    return split


def split_table(split: dict[str, dict[str, float]]) -> str:
    lines = ["| run | " + " | ".join(f"{p} ms" for p in PARTS) + " |", "|" + "---|" * (len(PARTS) + 1)]
    for name, ms in split.items():
        lines.append(f"| {name} | " + " | ".join(f"{ms[p]:.2f}" for p in PARTS) + " |")
    return "\n".join(lines)


def table(result: dict) -> str:
    def cell(v: float | None, ok: bool | None) -> str:
        return (
            "not reached" if v is None else f"{v:.1f}" + {True: " (met)", False: " (not met)", None: ""}[ok]
        )

    head = ["run", "seeds", *(f"{k} (goal {'<=' if le else '>='} {g:g})" for k, (g, le) in GOALS.items())]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, r in result["runs"].items():
        cells = [cell(r["figures"][k], r["met"][k]) for k in GOALS]
        lines.append("| " + " | ".join([run, str(r["seeds"]), *cells]) + " |")
    return "\n".join(lines) + f"\n\nTRL to 90 %: {cell(result['trl_to_90_s'], None)} (training seconds)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(f"error: expected gpu.sh's output directory, got {argv}", file=sys.stderr)
        return 2
    out = Path(argv[0])
    result = goals(out)
    if not result["runs"]:
        print(f"error: no time_to_accuracy results in {out} ({', '.join(RUNS.values())})", file=sys.stderr)
        return 1
    result["step_split_ms"] = step_split(out)
    print(table(result))
    print("\nThe step split (median ms a step, from step 10 on):\n")
    print(split_table(result["step_split_ms"]))
    (out / "goals.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
