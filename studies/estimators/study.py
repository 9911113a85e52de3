"""One policy of the estimators study: its prompts, its exact gradient, and every (variant, G) cell's metrics."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._runs import REPO, log_path, train
from .metrics import coinciding_groups, estimator_metrics, fingerprint
from .sampling import (
    Estimator,
    Sampler,
    answer_of,
    exact_result,
    load_policy,
    pass_at_k_gradient,
    select_prompts,
    variant_config,
)
from .variants import PASS_K, VARIANTS


def ensure_mid(out: Path, reference: Path, steps: int) -> Path:
    """OUTPUT_DIR/policy-mid/final: `steps` steps of train_grpo.py's default recipe from the reference (trained when
    missing or trained for another number of steps)."""
    run = out / "policy-mid"
    final = run / "final"
    cfg_path = run / "config.json"
    done = (final / "config.json").is_file() and cfg_path.is_file()
    if done and json.loads(cfg_path.read_text()).get("max_steps") == steps:
        return final
    print(
        f"training the mid policy: {steps} steps of train_grpo.py from {reference} into {run} ...", flush=True
    )
    t0 = time.perf_counter()
    rc = train(run, 42, steps, str(reference), ["--max_steps", str(steps)])
    if rc != 0:
        raise SystemExit(f"error: training the mid policy failed (exit {rc}); see {log_path(run)}")
    print(f"  done in {time.perf_counter() - t0:.0f} s", flush=True)
    return final


def study_policy(name: str, path: Path, args: argparse.Namespace, processes: Any) -> dict[str, Any]:
    """Every (variant, G) cell of one policy."""
    from tinygrpo.data.problems import load_split
    from tinygrpo.oracles.completion_space import completion_space

    t0 = time.perf_counter()
    model, tok = load_policy(path)
    T = args.max_completion_length
    space = completion_space(model.config.vocab_size, tok.eos_token_id, tok.pad_token_id, T)
    if args.prompts:
        answers = [answer_of(p) for p in args.prompts]
        acc = exact_result(model, tok, space, args.prompts, answers, grad=False).accuracy.tolist()
        chosen = {"prompts": list(args.prompts), "answers": answers, "accuracy": acc, "scanned": len(acc)}
    else:
        rows = load_split("addition", "validation").to_list()
        chosen = select_prompts(model, tok, space, rows, args.num_prompts, *args.accuracy_range, args.seed)
    prompts, answers = chosen["prompts"], chosen["answers"]
    P = len(prompts)
    print(
        f"{name}: {P} prompts (scanned {chosen['scanned']}), exact accuracy "
        f"{', '.join(f'{a:.2f}' for a in chosen['accuracy'])}",
        flush=True,
    )
    # Each prompt's exact gradient (g* is their mean): to tell a bias that reweighs prompts from one within them.
    per = [
        exact_result(model, tok, space, [p], [a], grad=True) for p, a in zip(prompts, answers, strict=True)
    ]
    per_prompt = torch.stack([r.grad for r in per])  # (P, D)
    g_star = per_prompt.mean(0)
    J = float(np.mean([r.J for r in per]))
    acc = torch.tensor([float(r.accuracy[0]) for r in per], dtype=torch.float64)
    targets = {"J": g_star, "pass@k": pass_at_k_gradient(per_prompt, acc, PASS_K)}
    setup_s = time.perf_counter() - t0
    print(f"  J = {J:.4f}, |g*| = {float(g_star.norm()):.4g} ({setup_s:.0f} s)", flush=True)

    sampler = Sampler(model, tok, prompts, answers, T)
    D = g_star.numel()
    cells: dict[str, dict[str, dict]] = {v: {} for v in args.variants}
    sampled: dict[str, list[float]] = {}
    prints: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}  # G -> variant -> fingerprint
    for G in args.G:
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + G)
        draws = [sampler.draw(G, gen) for _ in range(args.batches)]
        means = torch.stack([d.rewards.double().mean() for d in draws])
        sampled[str(G)] = [float(means.mean()), float(means.std() / math.sqrt(len(draws)))]
        prints[str(G)] = {}
        for v in args.variants:
            if VARIANTS[v].min_G > G:  # (pass_at_k needs k < G)
                continue
            t1 = time.perf_counter()
            est = Estimator(variant_config(v, G, P, T), model, sampler, processes)
            X = torch.empty(len(draws), D, dtype=torch.float64)
            for k, d in enumerate(draws):
                X[k] = est.gradient(d)
            m = estimator_metrics(X, g_star, per_prompt)
            if VARIANTS[v].target != "J":  # also against the gradient of the objective it is built for
                m["own_target"] = {
                    "name": VARIANTS[v].target,
                    **estimator_metrics(X, targets[VARIANTS[v].target]),
                }
            m["completions_per_batch"] = P * G
            m["seconds"] = time.perf_counter() - t1
            cells[v][str(G)] = m
            prints[str(G)][v] = fingerprint(X)
            print(
                f"  {name} G={G:>2} {v:>21}: cos(mean) {m['cos_mean']:.3f} ± {m['cos_mean_se']:.3f}  "
                f"mean cos {m['mean_cos']:.3f}  alpha {m['alpha']:.3g}  rel var {m['rel_var']:.3g}  "
                f"({m['seconds']:.1f} s)",
                flush=True,
            )
    return {
        "path": shown(path),
        **chosen,
        "J": J,
        "pass_at_k_objective": float((1 - (1 - acc) ** PASS_K).mean()),
        "grad_norm": float(g_star.norm()),
        "num_params": D,
        "sampled_reward": sampled,  # G -> [mean reward over the K batches, its standard error]
        "coincide": coinciding_groups(prints, args.variants),
        "cells": cells,
        "seconds": time.perf_counter() - t0,
    }


def shown(path: str | Path) -> str:
    """A path as the docs show it: relative to the repository when inside it (no machine's absolute paths)."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)
