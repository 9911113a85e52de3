"""`run`: every experiment of the comparison (the tabular runs here, the char GPT's in token_runs.py), then
results.json (every curve), comparison.json (the results the page shows), comparison.md and the figures; with
`docs`, the results file, the page (between markers naming that file) and the figures in the docs as well."""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from tinygrpo.oracles import bandit

from ..results import save
from .plots import plot_beliefs, plot_curves
from .report import summarize, write_report
from .settings import (
    METHODS,
    N_ANSWERS,
    N_QUESTIONS,
    REPO_ROOT,
    TOKEN_SEED_BASE,
    G,
    Settings,
    summarize_runs,
)
from .token_runs import addition_section, build_references, quiet, run_token


def table_curves(hist: dict) -> dict:
    """Tabular history -> curves on the completions axis, with a point at 0 (the zero table)."""
    zero_var = [m in (0.0, 1.0) for m in hist["mean_reward"]]  # all 8 wrong or all 8 right
    cum = np.cumsum(zero_var) / np.arange(1, len(zero_var) + 1)
    start = greedy_acc_table(torch.zeros(N_QUESTIONS, N_ANSWERS))
    return {
        "seed": hist["seed"],
        "x": [0] + [G * (s + 1) for s in range(len(hist["acc"]))],
        "acc": [start] + list(hist["acc"]),
        "zero_var_frac": [0.0] + [float(c) for c in cum],
    }


def greedy_acc_table(logits: torch.Tensor) -> float:
    _, gold = bandit.build_seed_bank()
    return float((logits.argmax(-1) == torch.tensor(gold)).float().mean())


# ----------------------------------------------------------------------------------------------------------------
# tabular runs


def run_table(
    kind: str, seeds: Sequence[int], steps: int, belief_seed: int | None
) -> tuple[list[dict], dict]:
    """One tabular run per seed; beliefs (36 x 13 probabilities) at start / midway / end for belief_seed."""
    runs, beliefs = [], {}
    for seed in seeds:
        policy, hist = bandit.train_demo(kind, seed, steps)
        runs.append(table_curves(hist))
        if seed == belief_seed:
            # the runs are deterministic and step-by-step identical to any longer run: train to midway again
            mid, _ = bandit.train_demo(kind, seed, steps // 2)
            beliefs = {
                "start": torch.full((N_QUESTIONS, N_ANSWERS), 1.0 / N_ANSWERS),
                "mid": mid.logits.detach().softmax(-1),
                "end": policy.logits.detach().softmax(-1),
                "x": [0, G * (steps // 2), G * steps],
            }
    return runs, beliefs


# ----------------------------------------------------------------------------------------------------------------
# main


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


FIGURES = ("accuracy_vs_completions.png", "skipped_fraction.png", "beliefs.png")


def run(
    out: Path,
    st: Settings,
    log: Callable[[str], None] = print,
    command: str = "python -m studies.compare",
    docs: Path | None = None,
) -> dict:
    """Every experiment, then the outputs in `out`; with `docs` (a directory), DOCS/results/comparison.json,
    DOCS/comparison.md drawn from it and the figures there too. The results dict of every curve."""
    t0 = time.perf_counter()
    quiet()
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "settings": {
            **asdict(st),
            "table_steps": st.table_steps,
            "token_steps": st.token_steps,
            "completions_per_token_step": st.completions_per_token_step,
            "group_size": G,
        }
    }
    methods: dict = {}
    beliefs: dict = {}
    # tables
    for kind in ("reinforce", "grpo"):
        seeds = [bandit.DEMO_SEEDS[kind] + i for i in st.offsets or range(st.seeds)]
        runs, b = run_table(
            kind, seeds, st.table_steps, seeds[st.belief_seed_index] if kind == "grpo" else None
        )
        methods[f"table_{kind}"] = {"seeds": seeds, "runs": runs}
        if b:
            beliefs["table"] = {**b, "seed": seeds[st.belief_seed_index]}
        log(f"table {kind}: final acc {[round(r['acc'][-1], 3) for r in runs]}")
    # char GPT
    refs: dict = {}
    token_seeds = [TOKEN_SEED_BASE + i for i in st.offsets or range(st.seeds)]
    for i, seed in enumerate(token_seeds):
        t = time.perf_counter()
        refs[str(seed)] = r = build_references(out, seed, st)
        log(
            f"seed {seed}: references format-only acc {r['format_only']['acc']:.3f} (well-formed "
            f"{r['format_only']['well_formed']:.2f}), imperfect acc {r['imperfect']['acc']:.3f} "
            f"[{time.perf_counter() - t:.1f}s]"
        )
        for method, (family, _, ref_name, _) in METHODS.items():
            if family != "gpt":
                continue
            t = time.perf_counter()
            want = i == st.belief_seed_index and method == "gpt_grpo_format"
            run_, b = run_token(method, r[ref_name], seed, out, st, want)
            methods.setdefault(method, {"seeds": token_seeds, "runs": []})["runs"].append(run_)
            if want:
                beliefs["gpt"] = {**b, "seed": seed}
            log(
                f"  {method}: acc {run_['acc'][0]:.3f} -> {run_['acc'][-1]:.3f}, zero-var "
                f"{run_['zero_var_frac'][-1]:.2f} [{time.perf_counter() - t:.1f}s]"
            )
    for m in methods.values():
        m["summary"] = summarize_runs(m["runs"])
    results["methods"] = {k: methods[k] for k in METHODS}
    results["references"] = refs
    results["beliefs"] = {k: {s: v for s, v in b.items()} for k, b in beliefs.items()}
    # addition
    t = time.perf_counter()
    results["addition"] = addition_section(out, st, log)
    log(
        f"addition: {results['addition']['acc_reference']:.3f} -> {results['addition']['acc_after_grpo']:.3f} "
        f"[{time.perf_counter() - t:.1f}s]"
    )
    # outputs
    plot_curves(
        results,
        "acc",
        "greedy accuracy (36 questions)",
        out / "accuracy_vs_completions.png",
        "Greedy accuracy vs completions sampled (G = 8; band: min-max over seeds)",
    )
    plot_curves(
        results,
        "zero_var_frac",
        "cumulative fraction of zero-variance groups",
        out / "skipped_fraction.png",
        "Zero-variance groups (all 8 right or all 8 wrong): GRPO gets no advantage from them",
    )
    plot_beliefs(
        beliefs["table"],
        beliefs["gpt"],
        out / "beliefs.png",
        beliefs["table"]["seed"],
        beliefs["gpt"]["seed"],
    )
    results["seconds"] = time.perf_counter() - t0
    results["threads"] = torch.get_num_threads()
    full = _jsonable(results)
    shown = summarize(full, command)
    save(out / "comparison.json", shown)
    write_report(shown, out / "comparison.md")
    (out / "results.json").write_text(json.dumps(full, indent=1) + "\n")
    log(
        f"wrote {out / 'comparison.md'}, comparison.json and results.json, 3 PNGs in {results['seconds']:.0f}s"
    )
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        path = save(docs / "results" / "comparison.json", shown)
        write_report(shown, docs / "comparison.md", _shown_path(path))
        for name in FIGURES:
            shutil.copyfile(out / name, docs / name)
        log(f"wrote {path}, {docs / 'comparison.md'} and the 3 PNGs")
    return results


def _shown_path(path: Path) -> str:
    """A path inside the repository as a relative one (the docs do not name this machine's checkout)."""
    p = path.resolve()
    return str(p.relative_to(REPO_ROOT)) if p.is_relative_to(REPO_ROOT) else str(p)
