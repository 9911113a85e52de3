"""The command line of the comparison study (python -m studies.compare); see the package docstring."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from . import __doc__ as DOC
from .run import run
from .settings import Settings, quick_settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m studies.compare", description=DOC.split("\n")[0])
    p.add_argument("--output_dir", "--output-dir", type=Path, default=Path("runs/compare"))
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="the seeds, as offsets from each method's base seed (default 0 1 2 3 4; 0 1 with --quick); a single "
        "number N (the earlier form) means 0 .. N-1",
    )
    p.add_argument(
        "--quick", action="store_true", help="CI smoke test: 2 seeds, 640 completions, 2 addition steps"
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads (tiny tensors: 1 is fastest)")
    p.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="also write DOCS/results/comparison.json, DOCS/comparison.md (drawn from it) and the figures "
        "(e.g. docs)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    st = quick_settings() if args.quick else Settings()
    if args.seeds is not None:
        seeds = list(range(args.seeds[0])) if len(args.seeds) == 1 and args.seeds[0] > 1 else args.seeds
        if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
            raise SystemExit("error: --seeds must be distinct offsets >= 0")
        st.seeds, st.offsets = len(seeds), tuple(seeds)
    return run(
        args.output_dir, st, command=shlex.join(["python", "-m", "studies.compare", *argv]), docs=args.docs
    )
