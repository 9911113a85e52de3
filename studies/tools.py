"""The tool-use experiment: does GRPO, rewarded for the answer alone, teach a tiny model to call a calculator?

    python -m studies.tools                                  # the references, then every arm, 3 seeds
    python -m studies.tools --dataset_test_split validation --seeds 42 --arms tool   # a choice, on validation
    python -m studies.tools --summarize                      # the results of the runs there
    python -m studies.tools --recipes                        # the harder variant's recipe screen (validation)
    python -m studies.tools --failures runs/tools/one_digit/seed42   # where its held-out failures go wrong

The reference (`python train_sft.py --task multiplication_tool`) saw, on one training product in four, a call to the
calculator, its reply and the answer ("<37*48=1776>1776"), and the answer alone on the others; the replies are the
environment's, outside its loss. Every arm is GRPO with the tool task's recipe (configs/multiplication_tool.yaml:
the reward is `tool_answer`, the integer after the answered calls, and nothing else):

- `tool`: from that reference, the calculator answering its calls (tinygrpo/rollout/environments/calculator.py);
- `tool_disabled` (control): the same reference with no environment: a call it writes goes unanswered, and the
  policy must write the reply itself;
- `direct` (control): from the reference that never saw a call (`--task multiplication`), no environment;
- `one_digit`: the harder variant (configs/multiplication_tool_digits.yaml): the tool multiplies by one digit only, so
  the reference (`--task multiplication_tool_digits`) calls it twice and works the sum itself,
  "<37*8=296><37*4=148>296+1480=1776", on one problem in four; the reward is the final answer's; and its control
  `one_digit_disabled`, the same reference with no environment (`--arms one_digit one_digit_disabled`); its recipe
  has 500 steps, chosen on validation by `--recipes` after a first test run at 300 (`one_digit_300` and
  `one_digit_disabled_300`, kept as measured).

Each run is `train_grpo.py --config configs/multiplication_tool.yaml --seed S` at one thread, two side by side
(runs/tools/<arm>/seed<S>), evaluated every 25 steps on the split asked for (test by default, for reporting: the
recipe is the reasoning experiment's, chosen there on validation). The results (docs/results/tools.json, from the
runs' metrics.jsonl) and the table drawn from them alone (`table`, in docs/tools.md): held-out accuracy before and
after, the share of greedy completions that call the tool, and the training minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from ._runs import REPO, add_output_and_jobs, read_metrics, run_logged
from .results import RESULTS, each, load, markdown, measurement, merged, pct, save
from .tasks import ensure_reference

CONFIG = "configs/multiplication_tool.yaml"
DIGITS = "configs/multiplication_tool_digits.yaml"
SEEDS = (42, 1, 2)
# arm -> (the task whose reference it starts from, its recipe, flags on the recipe, what it asks)
ARMS = {
    "tool": (
        "multiplication_tool",
        CONFIG,
        [],
        "GRPO from the tool reference, the calculator answering its calls",
    ),
    "tool_disabled": (
        "multiplication_tool",
        CONFIG,
        ["--environment", "None"],
        "control: the same reference with no environment (a call goes unanswered)",
    ),
    "direct": (
        "multiplication",
        CONFIG,
        ["--environment", "None"],
        "control: GRPO from the reference that never saw a call (the direct task's), the same recipe",
    ),
    "one_digit": (
        "multiplication_tool_digits",
        DIGITS,
        [],
        "the harder variant: a tool that multiplies by one digit, two calls and a sum worked by the policy",
    ),
    "one_digit_disabled": (
        "multiplication_tool_digits",
        DIGITS,
        ["--environment", "None"],
        "control: the harder variant's reference with no environment",
    ),
    # The harder variant at the recipe it had before its screen (300 steps, as the tool task's), kept as measured
    "one_digit_300": (
        "multiplication_tool_digits",
        DIGITS,
        ["--max_steps", "300"],
        "the harder variant for 300 steps, the tool task's recipe (before the screen chose 500)",
    ),
    "one_digit_disabled_300": (
        "multiplication_tool_digits",
        DIGITS,
        ["--max_steps", "300", "--environment", "None"],
        "its control, 300 steps",
    ),
}
DEFAULT_ARMS = ["tool", "tool_disabled", "direct"]
# The harder variant's recipe, screened on validation, seed 42 (`--recipes`): each candidate's flags on
# configs/multiplication_tool_digits.yaml, every setting the candidates vary written out, so that a change of the
# recipe file leaves the screen as it was.


def recipe_flags(lr: str, steps: int, sampler: str) -> list[str]:
    return ["--learning_rate", lr, "--max_steps", str(steps), "--prompt_sampler", sampler]


RECIPES = {
    "lr1e-3": (
        "lr 1e-3, 300 steps, prompts weighted to the unsolved (the reasoning experiment's recipe)",
        recipe_flags("0.001", 300, "unsolved"),
    ),
    "lr2e-3": ("lr 2e-3, 300 steps, unsolved", recipe_flags("0.002", 300, "unsolved")),
    "500steps": ("lr 1e-3, 500 steps, unsolved", recipe_flags("0.001", 500, "unsolved")),
    "informative": (
        "lr 1e-3, 300 steps, prompts weighted p (1 - p), toward those with signal",
        recipe_flags("0.001", 300, "informative"),
    ),
}
RECIPE_SEED = 42
RECIPE_STEPS = (25, 100, 200, 300, 500)  # the evaluations the screen's table shows


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed{seed}"


def grpo(
    arm: str, seed: int, out: Path, eval_split: str, extra: Sequence[str] = (), d: Path | None = None
) -> int:
    """One run of an arm (one thread), `extra` flags on its recipe, in `d` (default run_dir), its output beside."""
    task, config, flags, _ = ARMS[arm]
    reference = ensure_reference(task)
    d = d or run_dir(out, arm, seed)
    cmd = [
        sys.executable,
        "train_grpo.py",
        "--config",
        config,
        "--seed",
        str(seed),
        "--dataset_test_split",
        eval_split,
    ]
    cmd += [
        "--model_name_or_path",
        str(reference.relative_to(REPO) if reference.is_absolute() else reference),
    ]
    cmd += ["--output_dir", str(d), "--overwrite_output_dir", "true", "--torch_num_threads", "1"]
    cmd += ["--disable_tqdm", "true", "--save_steps", "0", *flags, *extra]
    return run_logged(cmd, d)


def run_summary(d: Path) -> dict:
    """A finished run's held-out accuracy and tool-call share (greedy, at its first and last evaluation) and its
    training seconds."""
    rows = read_metrics(d)
    ev = [r for r in rows if "eval/accuracy" in r]
    steps = [r for r in rows if "time/elapsed" in r]
    return {
        "start": ev[0]["eval/accuracy"],
        "after": ev[-1]["eval/accuracy"],
        "share_start": ev[0].get("eval/format/tool", 0.0),
        "share_after": ev[-1].get("eval/format/tool", 0.0),
        "seconds": steps[-1]["time/elapsed"],
        # the first evaluation at 90 % or more (the goal: within 10 minutes); None: never
        "seconds_to_90": next(
            (r["time/elapsed"] for r in ev if r["eval/accuracy"] >= 0.9 and "time/elapsed" in r), None
        ),
        "steps": steps[-1]["step"],
        "tools_call_frequency": steps[-1].get("tools/call_frequency"),
    }


def summarize(arms: list[str], seeds: list[int], out: Path, command: str, eval_split: str) -> dict:
    """The results: each arm's runs (per seed) and their medians."""
    rows = []
    for arm in arms:
        runs = {
            str(s): run_summary(run_dir(out, arm, s))
            for s in seeds
            if (run_dir(out, arm, s) / "metrics.jsonl").is_file()
        }
        if not runs:
            continue
        first = next(iter(runs.values()))
        rows.append(
            {
                "arm": arm,
                "reference": ARMS[arm][0],
                "what": ARMS[arm][3],
                "start": first["start"],
                "share_start": first["share_start"],
                "after": {k: r["after"] for k, r in runs.items()},
                "share_after": {k: r["share_after"] for k, r in runs.items()},
                "minutes": {k: round(r["seconds"] / 60, 2) for k, r in runs.items()},
                "seconds_to_90": {k: r["seconds_to_90"] for k, r in runs.items()},
                "steps": first["steps"],
                "command": command,
            }
        )
    return {
        "measurement": measurement(command, threads=1, jobs=2),
        "eval_split": eval_split,
        "seeds": seeds,
        "arms": rows,
    }


def recipe_dir(out: Path, recipe: str) -> Path:
    return out / "recipes" / recipe / f"seed{RECIPE_SEED}"


def recipe_summary(recipes: list[str], out: Path, command: str) -> dict:
    """The screen's results: each candidate's validation accuracy at every evaluation, its tool-call share and
    training minutes at its last, and the steps it was set to run (a run stopped before them shows where)."""
    rows = []
    for name in recipes:
        d = recipe_dir(out, name)
        if not (d / "metrics.jsonl").is_file():
            continue
        metrics = read_metrics(d)
        ev = [r for r in metrics if "eval/accuracy" in r]
        steps = [r for r in metrics if "time/elapsed" in r]
        rows.append(
            {
                "recipe": name,
                "what": RECIPES[name][0],
                "flags": RECIPES[name][1],
                "accuracy": {str(r["step"]): r["eval/accuracy"] for r in ev},
                "share_after": ev[-1].get("eval/format/tool", 0.0),
                "max_steps": json.loads((d / "config.json").read_text())["max_steps"],
                "minutes": round(steps[-1]["time/elapsed"] / 60, 2),
            }
        )
    return {
        "measurement": measurement(command, threads=1, jobs=2),
        "eval_split": "validation",
        "seed": RECIPE_SEED,
        "recipes": rows,
    }


def last_step(row: dict) -> int:
    """The step of a screened candidate's last evaluation (its max_steps unless it was stopped)."""
    return max(map(int, row["accuracy"]))


def chosen_recipe(results: dict) -> str:
    """The candidate with the best validation accuracy at its last evaluation, among those run to the end."""
    done = [r for r in results["recipes"] if last_step(r) == r["max_steps"]]
    return max(done, key=lambda r: r["accuracy"][str(r["max_steps"])])["recipe"]


def recipe_table(results: dict) -> str:
    """The harder variant's recipe screen (validation, one seed): accuracy at some evaluations and at the last one
    (a run stopped before its steps says so), the tool-call share there and the training minutes; the chosen
    candidate in bold."""
    best = chosen_recipe(results)
    head = [
        "recipe",
        *(f"step {t}" for t in RECIPE_STEPS),
        "at the end",
        "tool-call share at the end",
        "training minutes",
    ]
    out = []
    for r in results["recipes"]:
        last = last_step(r)
        cells = [pct(r["accuracy"][str(t)]) if str(t) in r["accuracy"] else "" for t in RECIPE_STEPS]
        end = pct(r["accuracy"][str(last)])
        if last < r["max_steps"]:  # (stopped by hand: its minutes are not a whole run's)
            end = f"{end} at step {last}, stopped"
        name = f"`{r['recipe']}`: {r['what']}"
        if r["recipe"] == best:
            name, end = f"**{name}**", f"**{end}**"
        minutes = f"{r['minutes']:.1f}" if last == r["max_steps"] else ""
        out.append([name, *cells, end, pct(r["share_after"]), minutes])
    return markdown(head, out)


def table(results: dict) -> str:
    """One row per arm: held-out accuracy before and after GRPO (each seed, then the median), the share of greedy
    completions that call the tool, before and after (median), each seed's training seconds to its first evaluation
    at 90 % or more ('-': never), and the median training minutes."""
    head = [
        "arm",
        "reference",
        f"{results['eval_split']} accuracy, reference",
        "after GRPO (per seed)",
        "median",
        "tool-call share: reference -> after (median)",
        "training s to 90 % (per seed)",
        "steps",
        "training minutes (median)",
    ]
    out = []
    for r in results["arms"]:
        after = list(r["after"].values())
        out.append(
            [
                r["arm"],
                f"`{r['reference']}`",
                pct(r["start"]),
                each(after),
                pct(statistics.median(after)),
                f"{pct(r['share_start'])} -> {pct(statistics.median(r['share_after'].values()))}",
                " / ".join("-" if s is None else f"{s:.0f}" for s in r.get("seconds_to_90", {}).values())
                or "-",
                str(r["steps"]),
                f"{statistics.median(r['minutes'].values()):.1f}",
            ]
        )
    return markdown(head, out)


TWO_CALLS = re.compile(r"<(\d+)\*(\d+)=(\d+)><(\d+)\*(\d+)=(\d+)>(\d+)\+(\d+)=(\d+)")
FAILURE_KINDS = (
    "a direct answer",
    "another shape",
    "a call copies the prompt wrong",
    "a reply copied wrong into the sum",
    "the sum worked wrong",
    "right",
)


def failure_kind(prompt: str, completion: str) -> str:
    """Where a completion of the harder variant ("<37*8=296><37*4=148>296+1480=1776" for 37*48) first departs from
    the worked product, step by step: its format, the calls' operands (copied from the prompt), the replies copied into
    the sum (the second shifted by a 0), the sum. The replies themselves are the calculator's."""
    a, b = map(int, prompt.rstrip("=").split("*"))
    text = completion.removesuffix("<eos>")
    if not text.startswith("<"):
        return FAILURE_KINDS[0]
    m = TWO_CALLS.fullmatch(text)
    if m is None:
        return FAILURE_KINDS[1]
    a1, d1, r1, a2, d2, r2, x, y, z = map(int, m.groups())
    if (a1, d1, a2, d2) != (a, b % 10, a, b // 10):
        return FAILURE_KINDS[2]
    if (x, y) != (r1, 10 * r2):
        return FAILURE_KINDS[3]
    return FAILURE_KINDS[4] if z != x + y else FAILURE_KINDS[5]


def failures(d: Path) -> dict[str, int]:
    """The kinds of a harder-variant run's held-out failures at its last evaluation (eval_failures.jsonl)."""
    last = json.loads((d / "eval_failures.jsonl").read_text().splitlines()[-1])
    counts = dict.fromkeys(FAILURE_KINDS, 0)
    for prompt, _, completion in last["failures"]:
        counts[failure_kind(prompt, completion)] += 1
    return counts


def run_side_by_side(runs: list[tuple[str, Path, Callable[[], int]]], parallel: int) -> int:
    """Each run (what it is, its directory, what starts it), `parallel` at a time; 1 with one `error:` line for the
    first that failed, else 0."""
    with ThreadPoolExecutor(parallel) as pool:
        codes = list(pool.map(lambda run: run[2](), runs))
    for (what, d, _), rc in zip(runs, codes, strict=True):
        if rc != 0:
            print(f"error: {what} failed (exit {rc}); see {d}.log", file=sys.stderr)
            return 1
    return 0


def recipes(names: list[str], args: argparse.Namespace) -> int:
    """Run the recipe screen's candidates `names` (two side by side), then summarize every candidate run there."""
    command = "python -m studies.tools --recipes" + ("" if names == list(RECIPES) else " " + " ".join(names))
    if not args.summarize:
        ensure_reference(ARMS["one_digit"][0])
        runs = [
            (
                f"recipe {n}",
                recipe_dir(args.out, n),
                partial(
                    grpo,
                    "one_digit",
                    RECIPE_SEED,
                    args.out,
                    "validation",
                    RECIPES[n][1],
                    recipe_dir(args.out, n),
                ),
            )
            for n in names
        ]
        if run_side_by_side(runs, args.parallel):
            return 1
    results = recipe_summary(list(RECIPES), args.out, command)
    if not results["recipes"]:
        print(
            f"error: no candidate of the recipe screen has a run in {args.out / 'recipes'}", file=sys.stderr
        )
        return 1
    path = save(args.results or RESULTS / "tools_recipe.json", results)
    print(recipe_table(results))
    print(f"results: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=DEFAULT_ARMS)
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    p.add_argument("--dataset_test_split", default="test")
    p.add_argument("--summarize", action="store_true", help="only the results of the runs already there")
    p.add_argument(
        "--results", type=Path, default=None, help="the results file (default docs/results/tools.json)"
    )
    p.add_argument(
        "--recipes",
        nargs="*",
        choices=list(RECIPES),
        default=None,
        help="the harder variant's recipe screen instead (validation, seed 42): these candidates (none named: all);"
        " results in docs/results/tools_recipe.json",
    )
    p.add_argument(
        "--failures",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="only the kinds of these harder-variant runs' held-out failures at their last evaluation",
    )
    add_output_and_jobs(p, REPO / "runs" / "tools")
    args = p.parse_args(argv)
    if args.failures:
        for d in args.failures:
            print(f"{d}: " + ", ".join(f"{k} {n}" for k, n in failures(d).items()))
        return 0
    if args.recipes is not None:
        return recipes(args.recipes or list(RECIPES), args)
    command = "python -m studies.tools" + "".join(
        f" --{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in (("arms", args.arms), ("seeds", args.seeds), ("eval_split", args.dataset_test_split))
        if v != {"arms": DEFAULT_ARMS, "seeds": list(SEEDS), "eval_split": "test"}[k]
    )
    if not args.summarize:
        for task in dict.fromkeys(ARMS[a][0] for a in args.arms):
            ensure_reference(task)  # (before the runs start side by side)
        runs = [
            (f"{a} seed {s}", run_dir(args.out, a, s), partial(grpo, a, s, args.out, args.dataset_test_split))
            for s in args.seeds
            for a in args.arms
        ]
        if run_side_by_side(runs, args.parallel):
            return 1
    results = summarize(args.arms, args.seeds, args.out, command, args.dataset_test_split)
    default = RESULTS / "tools.json" if args.dataset_test_split == "test" else args.out / "tools.json"
    if args.results is None and args.dataset_test_split == "test" and default.is_file():
        # (a run of some arms keeps the other arms' rows)
        results = merged(load(default), results, list(ARMS), rows="arms", key="arm")
    path = save(args.results or default, results)
    print(table(results))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
