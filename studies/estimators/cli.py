"""The command line of the estimators study (python -m studies.estimators); see the package docstring."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._runs import REPO
from ..results import measurement
from . import __doc__ as DOC
from .report import write_docs
from .sampling import SCAN_CHUNK, one_process
from .study import ensure_mid, shown, study_policy
from .variants import (
    DEFAULT_BATCHES,
    DEFAULT_G,
    DEFAULT_PROMPTS,
    DEFAULT_RANGE,
    MAX_COMPLETION_LENGTH,
    MID_STEPS,
    POLICIES,
    VARIANTS,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m studies.estimators",
        description=DOC.split("\n\n")[0],
        epilog=DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--policies", nargs="+", default=list(POLICIES), choices=POLICIES, help="Policies to study."
    )
    p.add_argument(
        "--model_name_or_path", default=None, help="Study this policy directory instead of --policies."
    )
    p.add_argument(
        "--reference", default=str(REPO / "checkpoints" / "reference"), help="The reference policy."
    )
    p.add_argument("--mid_steps", type=int, default=MID_STEPS, help="Training steps of the mid policy (60).")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--G", nargs="+", type=int, default=DEFAULT_G, help="Group sizes (default 2 4 8 16 32).")
    p.add_argument("--batches", type=int, default=DEFAULT_BATCHES, help="K: batches per (policy, G) (200).")
    p.add_argument("--num_prompts", type=int, default=DEFAULT_PROMPTS, help="P: prompts per batch (12).")
    p.add_argument("--accuracy_range", nargs=2, type=float, default=list(DEFAULT_RANGE), metavar=("LO", "HI"))
    p.add_argument("--prompts", nargs="+", default=None, help="Use these a+b= prompts instead of selecting.")
    p.add_argument("--max_completion_length", type=int, default=MAX_COMPLETION_LENGTH)
    p.add_argument("--seed", type=int, default=0, help="Prompt order and batch sampling seed (0).")
    p.add_argument("--output_dir", default="runs/estimators")
    p.add_argument("--docs", default=None, help="Write estimators.md and estimators.png here (e.g. docs).")
    p.add_argument(
        "--rewrite_docs", action="store_true", help="Run nothing: docs again from OUTPUT_DIR/estimators.json."
    )
    args = p.parse_args(argv)
    if args.batches < 3 or args.num_prompts < 1 or min(args.G) < 2:
        p.error("--batches must be >= 3, --num_prompts >= 1, every G >= 2")
    args.G = sorted(set(args.G))
    args.variants = [v for v in VARIANTS if v in args.variants]
    return args


def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(raw)
    out = Path(args.output_dir)
    if args.rewrite_docs:
        if not args.docs:
            print("error: --rewrite_docs needs --docs", file=sys.stderr)
            return 1
        write_docs(json.loads((out / "estimators.json").read_text()), Path(args.docs))
        return 0
    torch.set_num_threads(1)  # why: studies/_runs.py (one thread per run)
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    if args.model_name_or_path:
        paths = {Path(args.model_name_or_path).name: Path(args.model_name_or_path)}
    else:
        paths = {}
        for name in args.policies:
            ref = Path(args.reference)
            paths[name] = ref if name == "reference" else ensure_mid(out, ref, args.mid_steps)
    processes = one_process()
    lo, hi = args.accuracy_range
    selection = (
        f"the given prompts {' '.join(args.prompts)}"
        if args.prompts
        else f"the `validation` split of data/addition shuffled with random.Random({args.seed}), scanned in chunks "
        f"of {SCAN_CHUNK}; the first P = {args.num_prompts} prompts whose exact expected accuracy (tinygrpo/oracles/exact.py, "
        f"every completion enumerated) is in [{lo}, {hi}], chosen for each policy separately."
    )
    command = "python -m studies.estimators" + (" " + shlex.join(raw) if raw else "")
    res: dict[str, Any] = {
        "measurement": measurement(command, threads=1),
        "command": command,
        "setup": {
            "G": args.G,
            "batches": args.batches,
            "variants": args.variants,
            "max_completion_length": args.max_completion_length,
            "accuracy_range": [lo, hi],
            "seed": args.seed,
            "selection": selection,
            "mid_steps": args.mid_steps,
            "threads": "one thread (torch.set_num_threads(1))",
            "policies": describe_policies(paths, args),
        },
        "variants": {
            v: {"overrides": VARIANTS[v].overrides, "what": VARIANTS[v].what} for v in args.variants
        },
        "policies": {},
    }
    for name, path in paths.items():
        res["policies"][name] = study_policy(name, path, args, processes)
    res["seconds"] = time.perf_counter() - t0
    (out / "estimators.json").write_text(json.dumps(_finite(res), indent=1, allow_nan=False))
    print(f"wrote {out / 'estimators.json'} ({res['seconds']:.0f} s)")
    if args.docs:
        write_docs(json.loads((out / "estimators.json").read_text()), Path(args.docs))
    return 0


def describe_policies(paths: dict[str, Path], args: argparse.Namespace) -> str:
    said = []
    for name, path in paths.items():
        if name == "mid" and not args.model_name_or_path:
            said.append(
                f"`mid` = {args.mid_steps} steps of `train_grpo.py`'s default recipe from the reference, as the "
                "studies run it (studies/_runs.py: one thread, `train_without_validation`, seed 42), its "
                "`final` policy"
            )
        else:
            said.append(f"`{name}` = `{shown(path)}`")
    return "; ".join(said) + "."


def _finite(x: Any) -> Any:
    """The results with NaN / inf (an undefined statistic, e.g. no batch with signal) as null: strict JSON."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    if isinstance(x, float | np.floating):
        return float(x) if math.isfinite(x) else None
    return x
