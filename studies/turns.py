"""The multi-turn experiment: does GRPO teach a tiny model a strategy over turns, and how far is it from the optimal one?

    python -m studies.turns                                   # the reference, every arm, 3 seeds, test reported once
    python -m studies.turns --split validation --seeds 42 --arms env   # a choice, on validation
    python -m studies.turns --summarize                       # the results of the runs there, again

Guess the number (tinygrpo/data/tasks/guess_number.py): a hidden integer in [0, 64), each guess answered `<`, `>` or
`=` by an environment that keeps the episode's state (tinygrpo/rollout/environments/guess_number.py). Binary search
is optimal; its expected turns on a uniform hidden number are known exactly (5.125 for 64 numbers), and so are the
weak strategy's that the reference imitates (a uniform guess inside the interval the replies leave). The arms:

- `env`: GRPO from the reference (configs/guess_number.yaml: the environment's own reward, found less a twelfth per
  turn), the environment answering its guesses;
- `blind` (control): the same, but a wrong guess is answered `.` (guess_number_blind): the policy guesses blind;
- `more_sft` (control): the reference's recipe for twice its steps: more imitation of the weak strategy.

Each GRPO run is `train_grpo.py --config configs/guess_number.yaml --seed S` at one thread, two side by side, its
held-out evaluation on validation (choices are made there). Every policy (the reference, the control, each run's
final one) is then measured by `measure` on the split asked for (test by default, for reporting): success and mean
turns sampled at temperature 1 (the policy GRPO trains; 4 episodes per row, seeded) and greedy, the greedy policy's
exact expectation over the 64 numbers, and the distribution of first guesses. Results: docs/results/turns.json; the
tables in docs/turns.md are drawn from it alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

from ._runs import REPO, add_output_and_jobs, failure_reason, read_metrics, run_logged
from .results import RESULTS, each, load, markdown, measurement, save
from .tasks import ensure_reference, reference_of

TASK = "guess_number"
CONFIG = "configs/guess_number.yaml"
SEEDS = (42, 1, 2)
ARMS = {
    "env": ([], "guess_number", "GRPO, the environment answering each guess"),
    "blind": (
        ["--environment", "guess_number_blind"],
        "guess_number_blind",
        "control: GRPO with a wrong guess answered . (blind)",
    ),
}
# The recipe's candidates, screened on validation with seed 42 (`--recipes`): flags on configs/guess_number.yaml. The
# rule, set before the screen: the fewest sampled turns at a success of at least 99 %, among the candidates whose study
# fits 30 minutes on 2 cores (32 episodes a step: a blind run of 64 takes about 13 minutes at one thread, and the
# study runs three); the first recipe tried, 64 episodes a step, is shown beside them.
RECIPES = {
    "lr1e-3": (["--learning_rate", "0.001"], "32 episodes x 8 a step, lr 1e-3, 200 steps", True),
    "lr2e-3": (["--learning_rate", "0.002"], "the same, lr 2e-3 (configs/guess_number.yaml)", True),
    "batch512": (
        ["--per_device_train_batch_size", "512", "--learning_rate", "0.001"],
        "64 episodes x 8 a step, lr 1e-3 (the first recipe tried: its study takes longer than 30 minutes)",
        False,
    ),
}
RECIPE_SEED = 42
MORE_SFT = 2  # the more-SFT control trains the reference's recipe for this many times its steps
SAMPLES = 4  # sampled episodes per held-out row
EVAL_SEED = 1234  # the sampled episodes' generator (the same draws for every policy)
OUT = REPO / "runs" / "turns"
RESULTS_FILE = RESULTS / "turns.json"


# ---------------------------------------------------------------------------------------------- the exact oracles


def binary_search_turns(n: int) -> list[int]:
    """The turns binary search (the midpoint rule, an optimal search) takes on each number of [0, n)."""
    out = []
    for target in range(n):
        lo, hi, turns = 0, n - 1, 1
        while (g := (lo + hi) // 2) != target:
            lo, hi, turns = (lo, g - 1, turns + 1) if target < g else (g + 1, hi, turns + 1)
        out.append(turns)
    return out


@cache
def weak_expected_turns(n: int) -> float:
    """The weak strategy's expected turns on a uniform hidden number in [0, n), exactly (no cap): each guess uniform in
    the interval, W(m) = 1 + sum_g (g W(g) + (m - 1 - g) W(m - 1 - g)) / m^2."""
    w = [0.0] * (n + 1)
    for m in range(1, n + 1):
        w[m] = 1 + sum(g * w[g] + (m - 1 - g) * w[m - 1 - g] for g in range(m)) / (m * m)
    return w[n]


# ---------------------------------------------------------------------------------------------- measuring a policy


def episodes(
    model_dir: Path, env_name: str, rows: dict[str, list], temperature: float, samples: int, picture: int = 0
) -> tuple[list[str], list[list]]:
    """`samples` episodes of the policy at `model_dir` on each row (temperature 0: greedy, one each), with the
    environment `env_name` answering: the transcripts (<eos> kept) and, for the first `picture` of them, each token
    with who wrote it and the policy's probability of it there (at temperature 1)."""
    import torch

    from tinygrpo.model.text import decode_completions
    from tinygrpo.rollout.config import SamplingParams
    from tinygrpo.rollout.environment import get_environment
    from tinygrpo.rollout.sampling import completion_logits, sample_completions
    from tinygrpo.rollout.tool_calls import ToolUse
    from tinygrpo.run.launch import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(str(model_dir), "model")
    model.eval()
    env = get_environment(env_name)
    tools = ToolUse(env, tok, env.max_calls).with_rows(rows)
    enc = tok(rows["prompt"], padding=True, return_tensors="pt")
    length = (
        env.max_calls * 4 + 1
    )  # (the configs' max_completion_length: 12 turns of at most 4 tokens, <eos>)
    params = SamplingParams.greedy(length) if temperature == 0 else SamplingParams(length, temperature)
    generator = None if temperature == 0 else torch.Generator().manual_seed(EVAL_SEED)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    ro = sample_completions(
        model,
        ids,
        mask,
        samples,
        params,
        generator,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tools=tools,
    )
    texts = decode_completions(tok, ro.completion_ids, ro.completion_mask)
    pictures = []
    if picture:
        rows_of = torch.arange(picture)  # (the first episodes: of the first prompt when samples >= picture)
        with torch.no_grad():
            logits = completion_logits(
                model, ids[rows_of // samples], mask[rows_of // samples], ro.completion_ids[:picture], 1
            )
        probs = torch.softmax(logits.float(), -1)
        for i in range(picture):
            n = int(ro.completion_mask[i].sum())
            got = ro.completion_ids[i, :n]
            p = probs[i, torch.arange(n), got].tolist()
            fed = ro.tool_mask[i, :n].tolist()
            pictures.append(
                [
                    [tok.convert_ids_to_tokens(t), "environment" if f else "policy", round(q, 3)]
                    for t, f, q in zip(got.tolist(), fed, p, strict=True)
                ]
            )
    return texts, pictures


def scored(texts: list[str], targets: list[int]) -> dict:
    """Success (the number found within the cap), mean turns (an episode that fails counts the cap) and the first
    guesses of transcripts on their hidden numbers."""
    from tinygrpo.data.tasks.guess_number import MAX_TURNS, found_in, turns_in, turns_of

    found = [found_in(t, n) for t, n in zip(texts, targets, strict=True)]
    turns = [turns_of(t)[0] if f else MAX_TURNS for t, f in zip(texts, found, strict=True)]
    first = Counter(str(ts[0][0]) if (ts := turns_in(t)) else "none" for t in texts)
    return {
        "episodes": len(texts),
        "success": sum(found) / len(texts),
        "mean_turns": statistics.mean(turns),
        "max_turns": max(turns),
        "first_guesses": dict(sorted(first.items(), key=lambda kv: -kv[1])),
    }


def measure(model_dir: Path, env_name: str, split: str) -> dict:
    """A policy on `split` (sampled and greedy) and its greedy policy's exact expectation over every number."""
    import torch

    from tinygrpo.data.problems import load_split
    from tinygrpo.data.tasks.guess_number import PROMPT, N

    torch.set_num_threads(1)
    rows = load_split(TASK, split).to_dict()
    targets = rows["target"]
    sampled, picture = episodes(model_dir, env_name, rows, 1.0, SAMPLES, picture=1)
    greedy, _ = episodes(model_dir, env_name, rows, 0, 1)
    every = {"prompt": [PROMPT] * N, "target": list(range(N))}
    exact, _ = episodes(model_dir, env_name, every, 0, 1)
    from tinygrpo.data.tasks.guess_number import found_in, turns_of

    return {
        "sampled": scored(sampled, [t for t in targets for _ in range(SAMPLES)]),
        "greedy": scored(greedy, targets),
        "greedy_exact": scored(exact, every["target"]),
        # the greedy policy's turns on each number 0..N-1 (None: not found within the cap)
        "exact_turns": [turns_of(x)[0] if found_in(x, n) else None for n, x in enumerate(exact)],
        "example": {"target": targets[0], "sampled": sampled[0], "greedy": greedy[0], "tokens": picture[0]},
    }


# ---------------------------------------------------------------------------------------------- the runs


def grpo(arm: str, seed: int, out: Path, extra: list[str], d: Path | None = None) -> int:
    flags, _, _ = ARMS[arm]
    reference = ensure_reference(TASK)
    d = d or out / arm / f"seed{seed}"
    cmd = [
        sys.executable,
        "train_grpo.py",
        "--config",
        CONFIG,
        "--seed",
        str(seed),
        "--dataset_test_split",
        "validation",
    ]
    cmd += ["--model_name_or_path", str(reference), "--output_dir", str(d), "--overwrite_output_dir", "true"]
    cmd += ["--torch_num_threads", "1", "--disable_tqdm", "true", "--save_steps", "0", *flags, *extra]
    return run_logged(cmd, d)


def more_sft(out: Path) -> int:
    from tinygrpo.data.task import get_task

    steps = get_task(TASK).reference["max_steps"] * MORE_SFT
    d = out / "more_sft"
    cmd = [sys.executable, "train_sft.py", "--task", TASK, "--max_steps", str(steps), "--output_dir", str(d)]
    return run_logged(cmd + ["--overwrite_output_dir", "true"], d)


def summarize(out: Path, arms: list[str], seeds: list[int], split: str, command: str) -> dict:
    """Every policy's measures (reading the finished runs), the exact oracles, the runs' training seconds."""
    from tinygrpo.data.task import get_task
    from tinygrpo.data.tasks.guess_number import MAX_TURNS, N, optimal_expected_turns

    reference = ensure_reference(TASK)
    policies = [
        {"policy": "reference", "env": "guess_number", **measure(reference, "guess_number", split)},
        {
            "policy": "reference (blind)",
            "env": "guess_number_blind",
            **measure(reference, "guess_number_blind", split),
        },
    ]
    if (out / "more_sft" / "config.json").is_file():
        steps = get_task(TASK).reference["max_steps"] * MORE_SFT
        row = measure(out / "more_sft", "guess_number", split)
        policies.append({"policy": f"more SFT ({steps} steps)", "env": "guess_number", **row})
    runs = []
    for arm in arms:
        _, env, what = ARMS[arm]
        for seed in seeds:
            d = out / arm / f"seed{seed}"
            if not (d / "final" / "config.json").is_file():
                print(f"{arm} seed {seed}: no finished run ({failure_reason(d)})", flush=True)
                continue
            metrics = read_metrics(d)
            seconds = max((r.get("time/elapsed", 0.0) for r in metrics), default=0.0)
            runs.append(
                {"arm": arm, "seed": seed, "what": what, "env": env, "train_seconds": round(seconds, 1)}
                | measure(d / "final", env, split)
            )
    return {
        "split": split,
        "numbers": N,
        "max_turns": MAX_TURNS,
        "optimal_expected_turns": optimal_expected_turns(N),
        "weak_expected_turns": weak_expected_turns(N),
        "policies": policies,
        "runs": runs,
        "measurement": measurement(command, threads=1),
    }


# ---------------------------------------------------------------------------------------------- the tables


def screen(out: Path, jobs: int, command: str) -> dict:
    """The recipe's candidates (RECIPES), each a GRPO run with the environment on seed 42, measured on validation."""
    ensure_reference(TASK)
    dirs = {name: out / "recipes" / name for name in RECIPES}
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda n: grpo("env", RECIPE_SEED, out, RECIPES[n][0], dirs[n]), RECIPES))
    rows = []
    for name, d in dirs.items():
        if not (d / "final" / "config.json").is_file():
            raise SystemExit(f"error: recipe {name}: no finished run ({failure_reason(d)})")
        _, what, fits = RECIPES[name]
        rows.append(
            {"recipe": name, "what": what, "fits": fits, **measure(d / "final", "guess_number", "validation")}
        )
    return {
        "seed": RECIPE_SEED,
        "split": "validation",
        "recipes": rows,
        "measurement": measurement(command, threads=1),
    }


def recipes_table(results: dict) -> str:
    """The recipe screen: each candidate's policy on validation."""
    rows = [[f"`{r['recipe']}`: {r['what']}", *_row("", r)[1:]] for r in results["recipes"]]
    fit = [r for r in results["recipes"] if r["fits"] and r["sampled"]["success"] >= 0.99]
    chosen = min(fit, key=lambda r: r["sampled"]["mean_turns"])["recipe"] if fit else None
    rule = (
        f"By the rule (the fewest sampled turns at a success of at least 99 %, among the candidates whose study fits "
        f"30 minutes): `{chosen}`."
        if chosen
        else "No candidate meets the rule."
    )
    return markdown(["candidate (seed 42, validation)", *HEAD[1:]], rows) + "\n\n" + rule


def _row(name: str, m: dict) -> list[str]:
    s, g, x = m["sampled"], m["greedy"], m["greedy_exact"]
    return [
        name,
        f"{100 * s['success']:.1f} %",
        f"{s['mean_turns']:.2f}",
        f"{100 * g['success']:.1f} %",
        f"{g['mean_turns']:.2f}",
        f"{x['mean_turns']:.3f}",
    ]


HEAD = [
    "policy",
    "success (T=1)",
    "mean turns (T=1)",
    "success (greedy)",
    "mean turns (greedy)",
    "greedy, exact",
]


def table(results: dict) -> str:
    """Success and mean turns of every policy against the exact limits."""
    rows = [_row(p["policy"], p) for p in results["policies"]]
    for arm in ARMS:
        mine = [r for r in results["runs"] if r["arm"] == arm]
        for r in mine:
            rows.append(_row(f"GRPO {arm}, seed {r['seed']}", r))
    opt, weak = results["optimal_expected_turns"], results["weak_expected_turns"]
    lines = [
        markdown(HEAD, rows),
        "",
        f"Binary search, exactly: {opt:.3f} turns (within 10 %: {1.1 * opt:.3f}); the weak strategy the reference "
        f"imitates, exactly: {weak:.3f} turns ({results['numbers']} numbers, cap {results['max_turns']} turns, "
        f"{results['split']} split; a failed episode counts the cap).",
    ]
    return "\n".join(lines)


def first_guesses(results: dict) -> str:
    """The share of sampled episodes opening with each guess: binary search opens at 31 or 32."""
    rows = []
    for name, m in [(p["policy"], p) for p in results["policies"]] + [
        (f"GRPO {r['arm']}, seed {r['seed']}", r) for r in results["runs"]
    ]:
        s = m["sampled"]
        top = list(s["first_guesses"].items())[:4]
        near = (
            sum(v for k, v in s["first_guesses"].items() if k.isdigit() and 28 <= int(k) <= 35)
            / s["episodes"]
        )
        rows.append(
            [name, f"{100 * near:.1f} %", ", ".join(f"{k} ({100 * v / s['episodes']:.0f} %)" for k, v in top)]
        )
    return markdown(["policy", "first guess in 28-35", "most frequent first guesses"], rows)


def summary(results: dict) -> str:
    """The goals against the runs: success, mean turns within 10 % of binary search on every seed, the blind control
    against the weak strategy, the study's minutes."""
    opt, weak = results["optimal_expected_turns"], results["weak_expected_turns"]
    env = [r for r in results["runs"] if r["arm"] == "env"]
    blind = [r for r in results["runs"] if r["arm"] == "blind"]
    lines = []
    if env:
        success = [r["sampled"]["success"] for r in env]
        turns = [r["sampled"]["mean_turns"] for r in env]
        gaps = [t / opt - 1 for t in turns]
        lines.append(
            f"- GRPO with the environment, seeds {', '.join(str(r['seed']) for r in env)}: success "
            f"{each(success)} (goal: at least 99 %), mean turns {each(turns, lambda x: f'{x:.2f}')} against binary "
            f"search's {opt:.3f}, {each(gaps, lambda x: f'{100 * x:+.1f} %')} (goal: within 10 % on every seed: "
            f"{'met' if all(g <= 0.1 for g in gaps) and min(success) >= 0.99 else 'not met'})."
        )
    if blind:
        turns = [r["sampled"]["mean_turns"] for r in blind]
        success = [r["sampled"]["success"] for r in blind]
        lines.append(
            f"- The blind control: success {each(success)}, mean turns {each(turns, lambda x: f'{x:.2f}')}. Told only "
            f"when it has found the number, a policy can find at most {results['max_turns']} of the "
            f"{results['numbers']} numbers within the cap ({results['max_turns'] / results['numbers']:.1%}), whatever "
            f"it learns; the reference with the replies finds "
            f"{next(p for p in results['policies'] if p['policy'] == 'reference')['sampled']['success']:.1%} in "
            f"{weak:.3f} turns on average (the weak strategy, exactly, without the cap)."
        )
    if "minutes" in results:
        lines.append(
            f"- The whole study took {results['minutes']:.1f} minutes on this machine (two runs side by side)."
        )
    return "\n".join(lines)


def departures(results: dict) -> str:
    """Where each greedy policy departs from the optimum, exactly: how many of the numbers it finds in k turns (one
    episode on each number), against binary search's, and the numbers it does not find within the cap."""
    n, cap = results["numbers"], results["max_turns"]
    head = ["policy (greedy)", *(str(k) for k in range(1, cap + 1)), "not found", "mean"]

    def row(name: str, turns: list[int | None]) -> list[str]:
        counts = [sum(t == k for t in turns) for k in range(1, cap + 1)]
        lost = [str(i) for i, t in enumerate(turns) if t is None]
        mean = sum(t if t is not None else cap for t in turns) / len(turns)
        said = f"{len(lost)}: {', '.join(lost)}" if 0 < len(lost) <= 8 else str(len(lost)) if lost else "-"
        return [name, *(str(c) if c else "" for c in counts), said, f"{mean:.3f}"]

    rows = [row("binary search", binary_search_turns(n))]
    rows += [row(p["policy"], p["exact_turns"]) for p in results["policies"] if "exact_turns" in p]
    rows += [
        row(f"GRPO {r['arm']}, seed {r['seed']}", r["exact_turns"])
        for r in results["runs"]
        if "exact_turns" in r
    ]
    return markdown(head, rows)


def _picture(tokens: list[list]) -> list[str]:
    """One episode's tokens as two table rows: each token (the environment's in italics) and the policy's probability
    of its own tokens."""
    shown = [f"*{t}*" if by == "environment" else f"`{t}`" for t, by, _ in tokens]
    p = [f"{q:.2f}" if by == "policy" else "" for _, by, q in tokens]
    return ["| " + " | ".join(shown) + " |", "| " + " | ".join(p) + " |"]


def episode(results: dict) -> str:
    """The first held-out row's first sampled episode, token by token, before GRPO and after (the first seed's run):
    the policy's tokens with their probability, the environment's observations in italics."""
    ref = next(p for p in results["policies"] if p["policy"] == "reference")
    after = next((r for r in results["runs"] if r["arm"] == "env"), None)
    out = []
    for name, m in [("before (the reference)", ref)] + (
        [(f"after (GRPO, seed {after['seed']})", after)] if after else []
    ):
        tokens = m["example"]["tokens"]
        width = len(tokens)
        out += [f"**{name}**, hidden number {m['example']['target']}:", ""]
        out += ["| " + " | ".join(str(i + 1) for i in range(width)) + " |", "|" + "---|" * width]
        out += _picture(tokens) + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_output_and_jobs(p, OUT)
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    p.add_argument(
        "--split", default="test", choices=["validation", "test"], help="the split policies are measured on"
    )
    p.add_argument("--no_more_sft", action="store_true", help="skip the more-SFT control")
    p.add_argument(
        "--recipes", action="store_true", help="screen the recipe's candidates on validation (seed 42)"
    )
    p.add_argument("--summarize", action="store_true", help="measure the finished runs again, train nothing")
    p.add_argument(
        "--results", type=Path, default=None, help="where the results go (default docs/results/turns.json)"
    )
    p.add_argument("extra", nargs="*", help="flags for every GRPO run, after --")
    args = p.parse_args(argv)
    command = "python -m studies.turns " + " ".join(argv if argv is not None else sys.argv[1:])
    start = time.perf_counter()
    if args.recipes:
        path = save(args.results or RESULTS / "turns_recipes.json", screen(args.out, args.parallel, command))
        print(recipes_table(load(path)))
        print(f"wrote {path}")
        return
    if not args.summarize:
        with ThreadPoolExecutor(args.parallel) as pool:
            # The control of more SFT needs no reference: it trains beside the reference, the runs after it.
            codes = [] if args.no_more_sft else [pool.submit(more_sft, args.out)]
            ensure_reference(TASK)
            runs = [(a, s) for a in args.arms for s in args.seeds]
            codes += [pool.submit(grpo, a, s, args.out, args.extra) for a, s in runs]
            codes = [c.result() for c in codes]
        if any(codes):
            print(
                f"{sum(1 for c in codes if c)} run(s) failed: see the .log files under {args.out}", flush=True
            )
    owner, reference = reference_of(TASK)
    if (
        args.summarize and not (reference / "config.json").is_file()
    ):  # (--summarize trains nothing, as it says)
        sys.exit(
            f"error: no reference at {reference} to measure: --summarize trains nothing; train it first "
            f"(python train_sft.py --task {owner}), or run the study without --summarize"
        )
    results = summarize(args.out, args.arms, args.seeds, args.split, command.strip())
    path = args.results or (RESULTS_FILE if args.split == "test" else args.out / "turns_validation.json")
    if not args.summarize:
        results["minutes"] = round((time.perf_counter() - start) / 60, 1)
    elif path.is_file():  # (measured again: the study's own minutes and command stay the run's)
        old = load(path)
        if "minutes" in old:
            results["minutes"] = old["minutes"]
            results["measurement"]["trained_by"] = old["measurement"].get(
                "trained_by", old["measurement"]["command"]
            )
    save(path, results)
    print(table(results))
    print(first_guesses(results))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
