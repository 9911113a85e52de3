"""The reasoning experiment: does GRPO, rewarded for the final answer alone, teach a tiny model to show its work?

    python -m studies.reasoning                                # the references, then every arm, 3 seeds
    python -m studies.reasoning --dataset_test_split validation --seeds 42 --arms mixed   # a choice, on validation
    python -m studies.reasoning --summarize                    # the results and figures of the runs there

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
for reporting; the choices were made with `--dataset_test_split validation`). The results (docs/results/reasoning.json, from
the runs' metrics.jsonl and completions.jsonl and the SFT control's sft_summary.json; in --out for a choice on
validation) and the tables drawn from them alone (in docs/reasoning.md, printed too): `table`, one row per arm;
`tokens_table`, what the steps did to each kind of token; `losses_table`, Dr. GRPO's length question, when runs of
two loss normalisers have finished (the published one from `--results docs/results/reasoning_losses.json`). The
screens that chose the recipe on validation are hand-typed results files with their commands
(docs/results/reasoning_shares.json: `shares_table`; docs/results/reasoning_recipe.json: `recipe_table`). The
figures (docs/reasoning.png: held-out accuracy, the scratchpad's share of the greedy completions, their mean length,
against training minutes; docs/reasoning_length.png: the length of the right and of the wrong sampled completions,
and the share worked, step by step under each loss normaliser) are drawn from the runs.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ._runs import REPO, add_output_and_jobs, read_metrics, run_logged
from .results import RESULTS, each, markdown, measurement, median, pct, save
from .tasks import ensure_reference


@dataclass(frozen=True)
class Experiment:
    """One problem set the experiment runs on: the recipe, the task of the mixed reference and of the direct one,
    and where its runs, results and figures go (the multiplication experiment's are the published defaults)."""

    config: str
    mixed: str
    direct: str
    name: str = "reasoning"  # runs/<name>, docs/results/<name>.json, docs/<name>.png, docs/<name>_length.png
    direct_flags: tuple[
        str, ...
    ] = ()  # what the direct reference needs beside the recipe (its shorter context)


EXPERIMENTS = {
    "multiplication": Experiment(
        "configs/multiplication_mixed.yaml", "multiplication_mixed", "multiplication"
    ),
    "addition_long": Experiment(
        "configs/addition_long_mixed.yaml",
        "addition_long_mixed",
        "addition_long",
        "reasoning_addition_long",
        # (addition_long's reference has 24 positions: room for the direct answer, 8 tokens, as its own recipe)
        ("--max_completion_length", "8"),
    ),
}
MULTIPLICATION = EXPERIMENTS["multiplication"]
CONFIG, MIXED, DIRECT = MULTIPLICATION.config, MULTIPLICATION.mixed, MULTIPLICATION.direct
# GRPO arms: the reference they start from (the experiment's mixed or direct one), and their flags on the recipe.
GRPO_ARMS = {
    "mixed": ("mixed", []),
    "direct": ("direct", []),
    "mixed_grpo": ("mixed", ["--loss_type", "grpo"]),
    "mixed_dr_grpo": ("mixed", ["--loss_type", "dr_grpo"]),
}
ARMS = (*GRPO_ARMS, "more_sft")
# Each step's sampled statistics are logged (the first is the reference's: what it samples before any update).
LOGGING = ["--logging_steps", "1"]
FORMAT = "scratchpad"


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed{seed}"


def grpo(
    arm: str, seed: int, out: Path, eval_split: str, flags: list[str], exp: Experiment = MULTIPLICATION
) -> int:
    """One GRPO run of the experiment's recipe (one thread), from the arm's reference."""
    from tinygrpo.data.task import get_task

    d = run_dir(out, arm, seed)
    role, arm_flags = GRPO_ARMS[arm]
    model = get_task(getattr(exp, role)).reference["output_dir"]
    cmd = [
        sys.executable,
        "train_grpo.py",
        "--config",
        exp.config,
        "--seed",
        str(seed),
        "--model_name_or_path",
        model,
    ]
    cmd += ["--output_dir", str(d), "--overwrite_output_dir", "true", "--torch_num_threads", "1", *LOGGING]
    cmd += ["--disable_tqdm", "true", "--save_steps", "0", "--dataset_test_split", eval_split, *arm_flags]
    cmd += [*(exp.direct_flags if role == "direct" else ()), *flags]
    return run_logged(cmd, d)


def reference_sft(exp: Experiment = MULTIPLICATION) -> tuple[dict, float]:
    """The mixed reference's SFT summary and its seconds per step: the rate the more-SFT control is sized by."""
    summary = json.loads((REPO / "checkpoints" / exp.mixed / "sft_summary.json").read_text())
    return summary, summary["train_seconds"] / summary["steps"]


def more_sft(seed: int, out: Path, eval_split: str, seconds: float, exp: Experiment = MULTIPLICATION) -> int:
    """The mixed reference's recipe at `seed`, with as many more steps as `seconds` of its SFT buy (one thread)."""
    summary, per_step = reference_sft(exp)
    steps = summary["steps"] + round(seconds / per_step)
    d = run_dir(out, "more_sft", seed)
    cmd = [
        sys.executable,
        "train_sft.py",
        "--task",
        exp.mixed,
        "--seed",
        str(seed),
        "--max_steps",
        str(steps),
    ]
    cmd += ["--output_dir", str(d), "--overwrite_output_dir", "true", "--torch_num_threads", "1"]
    cmd += ["--dataset_test_split", eval_split, "--logging_steps", "500"]
    return run_logged(cmd, d)


def mixed_seconds(out: Path, seeds: list[int], results: Path) -> float:
    """The seconds the more-SFT control adds to the reference's SFT: the median training minutes of the `mixed` runs
    in `out`, else of the `mixed` row in the results file (the runs it was computed from, published)."""
    if mixed := finished(out, "mixed", seeds):
        return 60 * _med([rows[-1]["minutes"] for _, rows in mixed])
    if results.is_file():
        rows = [a for a in json.loads(results.read_text())["arms"] if a["arm"] == "mixed"]
        if rows:
            return 60 * rows[0]["minutes"]
    sys.exit(
        f"error: the more_sft control needs the mixed arm's minutes: no finished runs of it in {out}/mixed and "
        f"no mixed row in {results}"
    )


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


def extra_sft_minutes(
    sft: list[tuple[int, dict]], exp: Experiment = MULTIPLICATION
) -> tuple[dict, list[float]]:
    """The reference's SFT summary, and the minutes each more-SFT run's extra steps buy at the reference's own SFT
    rate (what the control was sized by; its wall seconds depend on what else ran beside it)."""
    ref, rate = reference_sft(exp)
    return ref, [(s["steps"] - ref["steps"]) * rate / 60 for _, s in sft]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else pct(x)


def _med(xs: list[float]) -> float:
    return median(xs)


# ------------------------------------------------------------------------------------------ runs -> results


def grpo_arm(arm: str, runs: list[tuple[int, list[dict]]]) -> dict:
    """What the table shows of a GRPO arm, from its finished runs' evaluations (the first: the reference's; the
    last: after GRPO): the accuracy after of each seed, and the medians over seeds of the others."""
    first, last = [rows[0] for _, rows in runs], [rows[-1] for _, rows in runs]
    within = [x["acc_in"] for x in last if x["acc_in"] is not None]
    return {
        "arm": arm,
        "start": _med([x["accuracy"] for x in first]),
        "after": {str(s): rows[-1]["accuracy"] for s, rows in runs},
        "share_start": _med([x["share"] for x in first]),
        "share_after": _med([x["share"] for x in last]),
        "accuracy_within_after": _med(within) if within else None,
        "length_start": _med([x["length"] for x in first]),
        "length_after": _med([x["length"] for x in last]),
        "minutes": _med([x["minutes"] for x in last]),
    }


def sft_control(out: Path, seeds: list[int], exp: Experiment = MULTIPLICATION) -> dict | None:
    """The more-SFT control's row, from its runs' sft_summary.json: its steps and the reference's, the accuracy of
    each seed, the medians of its worked share and of the minutes its extra steps buy at the reference's rate."""
    sft = sft_results(out, seeds)
    if not sft:
        return None
    ref, extra = extra_sft_minutes(sft, exp)
    return {
        "steps": sft[0][1]["steps"],
        "reference_steps": ref["steps"],
        "after": {str(s): r["eval_accuracy"] for s, r in sft},
        "share_after": _med([r["eval_formats"][FORMAT] for _, r in sft]),
        "extra_minutes": _med(extra),
    }


WINDOWS = 5  # the loss table's lengths: the last WINDOWS windows of BIN steps the loss arms share


def length_question(out: Path, seeds: list[int]) -> dict | None:
    """The loss table: for each loss normaliser's arm, the accuracy after of each seed, the median worked share
    after, and the mean length of the right and of the wrong sampled completions over the last WINDOWS windows of
    BIN steps the arms share (binned: each seed's mean in a window, the median over seeds; then the mean over the
    windows). None unless runs of at least two normalisers have finished (a comparison needs two)."""
    arms = {arm: runs for arm in LOSSES if (runs := finished(out, arm, seeds))}
    if len(arms) < 2:
        return None
    lengths = {
        arm: {k: binned([sampled(run_dir(out, arm, s)) for s, _ in runs], k) for k in ("right", "wrong")}
        for arm, runs in arms.items()
    }
    shared = set.intersection(*(set(v) for per in lengths.values() for v in per.values()))
    windows = list(range(max(shared) - WINDOWS + 1, max(shared) + 1)) if shared else []
    rows = []
    for arm, runs in arms.items():
        mean = {
            k: statistics.fmean(v[w] for w in windows if w in v) if any(w in v for w in windows) else None
            for k, v in lengths[arm].items()
        }
        rows.append(
            {
                "loss": LOSSES[arm],
                "arm": arm,
                "after": {str(s): rows_[-1]["accuracy"] for s, rows_ in runs},
                "share_after": _med([rows_[-1]["share"] for _, rows_ in runs]),
                **mean,
            }
        )
    steps = [windows[0] * BIN + 1, (windows[-1] + 1) * BIN] if windows else None
    return {"steps": steps, "rows": rows}


def summarize(
    out: Path, seeds: list[int], command: str, eval_split: str = "test", exp: Experiment = MULTIPLICATION
) -> dict:
    """docs/results/reasoning.json from the runs in `out`: a row per GRPO arm with finished runs, the more-SFT
    control's, what the steps did to each kind of token (the first seed's `mixed` run), and the loss table when
    runs of two loss normalisers have finished (None where there are no runs for one)."""
    return {
        "measurement": measurement(command, threads=1, side_by_side=2, eval_split=eval_split),
        "arms": [grpo_arm(arm, runs) for arm in GRPO_ARMS if (runs := finished(out, arm, seeds))],
        "more_sft": sft_control(out, seeds, exp),
        "tokens": token_moves(run_dir(out, "mixed", seeds[0])),
        "losses": length_question(out, seeds),
    }


def updated(old: dict, new: dict) -> dict:
    """A study of some arms updates their rows of the results file and keeps the others' (each new row then carries
    its own `measurement`; the file's stays the one of the rows it kept): the GRPO arms in their order, the more-SFT control's, and
    the token and loss tables, new where the study computed them."""
    covered = {a["arm"] for a in new["arms"]} >= {a["arm"] for a in old["arms"]}
    if covered and (new["more_sft"] or not old.get("more_sft")):
        return new  # (every row measured again)
    mark = {"measurement": new["measurement"]}
    arms = {a["arm"]: a for a in old["arms"]} | {a["arm"]: {**a, **mark} for a in new["arms"]}
    return {
        **old,
        "arms": [arms[a] for a in GRPO_ARMS if a in arms],
        "more_sft": {**new["more_sft"], **mark} if new["more_sft"] else old.get("more_sft"),
        "tokens": new["tokens"] or old.get("tokens"),
        "losses": new["losses"] or old.get("losses"),
    }


# ------------------------------------------------------------------------------------------ results -> markdown

HEAD = [
    "arm",
    "start",
    "accuracy after (median; each)",
    "scratchpad share: start -> after (median)",
    "accuracy within the scratchpad (after)",
    "mean greedy length: start -> after",
    "minutes (median)",
]


def _after(after: dict[str, float]) -> str:
    xs = list(after.values())
    return f"**{_pct(_med(xs))}** ({each(xs, _pct)}; seeds {', '.join(after)})"


def table(results: dict) -> str:
    """The results table (docs/reasoning.md, the README) from docs/results/reasoning.json: one row per arm, before
    and after (median of seeds; each), the scratchpad's share, mean length, minutes."""
    rows = [
        [
            f"`{a['arm']}` (GRPO)",
            _pct(a["start"]),
            _after(a["after"]),
            f"{_pct(a['share_start'])} -> **{_pct(a['share_after'])}**",
            _pct(a["accuracy_within_after"]),
            f"{a['length_start']:.1f} -> {a['length_after']:.1f}",
            f"{a['minutes']:.1f}",
        ]
        for a in results["arms"]
    ]
    c = results.get("more_sft")
    if c:
        rows.append(
            [
                f"`more_sft` (no RL: {c['steps']} SFT steps, not {c['reference_steps']})",
                "(the same recipe)",
                _after(c["after"]),
                f"-> {_pct(c['share_after'])}",
                "n/a",
                "n/a",
                f"{c['extra_minutes']:.1f} more of SFT (at the reference's rate)",
            ]
        )
    return markdown(HEAD, rows)


TOKEN_KINDS = {
    "first": "the first (the format's choice)",
    "digits": "the other digits (partial products, sum, answer)",
    "syntax": "the work's syntax (`*`, `=`, `,`, `+`, `<eos>`)",
}


def tokens_table(results: dict) -> str:
    """What the steps did to each kind of token (docs/reasoning.md) from docs/results/reasoning.json."""
    head = ["token", "tokens", "mean abs(ratio - 1)", "mean entropy (nats)"]
    kinds = results["tokens"]["kinds"]
    return markdown(
        head,
        [
            [TOKEN_KINDS[k], str(v["tokens"]), f"{v['moved']:.4f}", f"{v['entropy']:.3f}"]
            for k, v in kinds.items()
        ],
    )


def _one(x: float) -> str:
    return f"{100 * x:.1f}"


def losses_table(results: dict) -> str:
    """Dr. GRPO's length question (docs/reasoning.md) from the loss arms' results (docs/results/reasoning_losses.json):
    accuracy after (median; each), the worked share after, the sampled lengths of the right and wrong completions."""
    q = results["losses"]
    first, last = q["steps"]
    head = ["loss", "accuracy after (median; each)", "worked share after"]
    head.append(f"sampled length in steps {first}-{last}, right / wrong")
    rows = []
    for r in q["rows"]:
        xs = list(r["after"].values())
        lengths = " / ".join("n/a" if r[k] is None else f"{r[k]:.1f}" for k in ("right", "wrong"))
        rows.append(
            [
                f"`{r['loss']}`",
                f"{pct(_med(xs), space=True)} ({each(xs, _one)})",
                pct(r["share_after"], space=True),
                lengths,
            ]
        )
    return markdown(head, rows)


def _pair(e: dict, worked: str = "") -> str:
    return f"{pct(e['accuracy'], space=True)}, {pct(e['worked'], space=True)}{worked}"


def _lr(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


def _tight(text: str) -> str:
    """An empty cell as '| |', as the hand-typed tables had it."""
    return re.sub(r"\|  (?=\|)", "| ", text)


def shares_table(results: dict) -> str:
    """The screen of the worked share in SFT (docs/reasoning.md; validation, one seed) from
    docs/results/reasoning_shares.json: each reference (accuracy, worked share, accuracy worked / direct) and GRPO
    from it at the steps of the columns (held-out accuracy, worked share); a run stopped early shows its last
    evaluation in the next column, a run longer than the columns its last in the last column."""
    steps = results["steps"]
    head = ["worked share in SFT", "reference: accuracy, worked share (greedy), accuracy worked / direct"]
    head += [f"GRPO step {steps[0]}", *(f"step {s}" for s in steps[1:])]
    rows = []
    for r in results["rows"]:
        ref = r["reference"]
        cells = [
            f"{100 * r['mix_share']:.0f} %",
            f"{_pair(ref)}, {pct(ref['accuracy_worked'], space=True)} / {pct(ref['accuracy_direct'], space=True)}",
        ]
        stopped = r.get("stopped_at")
        for s in steps:
            if str(s) in r["evals"]:
                cells.append(_pair(r["evals"][str(s)]))
            elif stopped is not None and stopped < s:
                cells.append(f"(stopped at {stopped}: {_pair(r['evals'][str(stopped)])})")
                stopped = None
            else:
                cells.append("")
        later = [int(s) for s in r["evals"] if int(s) > steps[-1]]
        if later:
            cells[-1] += f" ({max(later)} steps: {_pair(r['evals'][str(max(later))])})"
        rows.append(cells)
    return _tight(markdown(head, rows))


def recipe_table(results: dict) -> str:
    """The screen of the reference's SFT steps and GRPO's rate (docs/reasoning.md; validation, seed 42) from
    docs/results/reasoning_recipe.json: each reference (accuracy, worked share), GRPO from it at the steps of the
    columns (held-out accuracy, worked share) and its minutes; the recipe chosen in bold; a reference trained longer
    instead of GRPO, its accuracy in the last column and its extra minutes of SFT."""
    steps = results["steps"]
    head = ["reference", "GRPO", *(f"step {s}" for s in steps), "minutes"]
    rows, previous = [], None
    for r in results["rows"]:
        ref = r["reference"]
        if r.get("lr") is None:  # more SFT, no GRPO
            cells = [f"{r['sft_steps']} steps, no GRPO", "", *([""] * (len(steps) - 1))]
            cells += [_pair(ref, " worked"), f"{r['extra_sft_minutes']:.1f} more of SFT"]
        else:
            grpo = f"lr {_lr(r['lr'])}, {r['grpo_steps']} steps"
            cells = [
                "the same"
                if r["sft_steps"] == previous
                else f"{r['sft_steps']} steps: {_pair(ref, ' worked')}",
                f"**{grpo}**" if r.get("chosen") else grpo,
            ]
            for s in steps:
                e = r["evals"].get(str(s))
                bold = r.get("chosen") and s == r["grpo_steps"]
                cells.append("" if e is None else f"**{_pair(e)}**" if bold else _pair(e))
            cells.append("" if r.get("minutes") is None else f"{r['minutes']:.1f}")
        previous = r["sft_steps"]
        rows.append(cells)
    return _tight(markdown(head, rows))


def figure(out: Path, seeds: list[int], path: Path, exp: Experiment = MULTIPLICATION) -> bool:
    """Held-out accuracy, the scratchpad's share and the mean greedy length against training minutes: every seed
    of each GRPO arm, and the more-SFT control as points at its extra minutes. False, and nothing written, without
    finished runs of the mixed arm (a study of the control alone leaves the published figure alone)."""
    if not finished(out, "mixed", seeds):
        return False
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
        xs = extra_sft_minutes(sft, exp)[1]
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
    return True


SYNTAX = set("*=,+") | {"<eos>"}


def token_moves(d: Path) -> dict | None:
    """What the steps did to each kind of token, over a run's logged completions (their token columns): the first
    token (the format's choice), the other digits, the work's syntax; for each, the tokens counted, the mean
    |ratio - 1| and the mean entropy at the token's position. None when the run logged no token columns."""
    from tinygrpo.run.logs import read_jsonl

    kinds: dict[str, list[tuple[float, float]]] = {k: [] for k in TOKEN_KINDS}
    rows = [r for r in read_jsonl(d / "completions.jsonl") if "tokens" in r]
    if not rows:
        return None
    for r in rows:
        for j, (t, ratio, entropy) in enumerate(
            zip(r["tokens"], r["token_ratio"], r["token_entropy"], strict=True)
        ):
            kind = "first" if j == 0 else "digits" if t.isdigit() else "syntax" if t in SYNTAX else ""
            if kind:
                kinds[kind].append((abs(ratio - 1), entropy))
    moves = {}
    for kind, vals in kinds.items():
        if vals:
            moved, ent = (statistics.fmean(v) for v in zip(*vals, strict=True))
            moves[kind] = {"tokens": len(vals), "moved": moved, "entropy": ent}
    return {"run": f"{d.parent.name}/{d.name}", "completions": len(rows), "kinds": moves}


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


def all_tables(results: dict) -> str:
    """Every table the results hold, as the study prints them."""
    text = table(results)
    if results.get("tokens"):
        t = results["tokens"]
        text += f"\n\n{t['completions']} logged completions of {t['run']}:\n\n{tokens_table(results)}"
    if results.get("losses"):
        text += f"\n\n{losses_table(results)}"
    return text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--experiment",
        choices=list(EXPERIMENTS),
        default="multiplication",
        help="the problem set: multiplication (docs/reasoning.md's) or addition_long (its runs, results and figures "
        "under reasoning_addition_long)",
    )
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--seeds", nargs="+", type=int, default=[42, 1, 2])
    p.add_argument("--dataset_test_split", default="test", help="test (reporting) or validation (choices)")
    add_output_and_jobs(p, None)
    p.add_argument(
        "--summarize", action="store_true", help="only write the results and figures of the runs there"
    )
    p.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="where the figures go (default: docs/ for the test split; beside the runs, in --out, for a choice on "
        "validation, so that it never overwrites the published ones)",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=None,
        help="where the results go (default: docs/results/reasoning.json when the figures go to docs/, "
        "reasoning.json in --docs otherwise)",
    )
    p.add_argument("flags", nargs="*", help="after --: more train_grpo.py flags for the GRPO arms")
    args = p.parse_args(argv)
    exp = EXPERIMENTS[args.experiment]
    if args.out is None:
        args.out = REPO / "runs" / exp.name
    if args.docs is None:
        args.docs = REPO / "docs" if args.dataset_test_split == "test" else args.out
    if args.results is None:
        published = args.docs.resolve() == (REPO / "docs").resolve()
        args.results = (RESULTS if published else args.docs) / f"{exp.name}.json"
    if not args.summarize:
        for role in {GRPO_ARMS[a][0] for a in args.arms if a in GRPO_ARMS} | {"mixed"}:
            ensure_reference(getattr(exp, role))
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
            codes = list(
                pool.map(lambda j: grpo(*j[1:], args.out, args.dataset_test_split, args.flags, exp), first)
            )
        seconds = None
        if later and later[0][0] == "sft":
            seconds = mixed_seconds(args.out, args.seeds, args.results)

        def job(j: tuple[str, str, int]) -> int:
            kind, arm, seed = j
            if kind == "sft":
                return more_sft(seed, args.out, args.dataset_test_split, seconds, exp)
            return grpo(arm, seed, args.out, args.dataset_test_split, args.flags, exp)

        with ThreadPoolExecutor(args.parallel) as pool:
            codes += list(pool.map(job, later))
        if any(codes):
            print(f"some runs failed (see the logs under {args.out})", file=sys.stderr)
    command = (
        f"python -m studies.reasoning --arms {' '.join(args.arms)} --seeds {' '.join(map(str, args.seeds))}"
    )
    command += f" --experiment {args.experiment}" if args.experiment != "multiplication" else ""
    command += f" --dataset_test_split {args.dataset_test_split}" if args.dataset_test_split != "test" else ""
    command += f" -- {' '.join(args.flags)}" if args.flags else ""
    results = summarize(args.out, args.seeds, command, args.dataset_test_split, exp)
    if args.results.is_file():
        results = updated(json.loads(args.results.read_text()), results)
    save(args.results, results)
    print(all_tables(results))
    print(f"wrote {args.results}; python -m studies.results renders the docs' tables from it")
    args.docs.mkdir(parents=True, exist_ok=True)
    figure(args.out, args.seeds, args.docs / f"{exp.name}.png", exp)
    length_figure(args.out, args.seeds, args.docs / f"{exp.name}_length.png")


if __name__ == "__main__":
    main()
