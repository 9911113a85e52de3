"""Rebuild the committed problem files: `python data/build.py` (deterministic; see tinygrpo/problems.py).

`python data/build.py --digits 3 --out data/addition_3d` writes a 3-digit addition set next to them.
"""

import argparse
from pathlib import Path

from tinygrpo.problems import DATA_DIR, build_addition, build_all, write_jsonl

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--digits", type=int, default=None, help="build one addition set with this many digits")
    p.add_argument("--out", type=Path, default=None, help="output directory for --digits")
    args = p.parse_args()
    if args.digits is None:
        for path in build_all(DATA_DIR):
            print(path)
    else:
        out = args.out or DATA_DIR / f"addition_{args.digits}d"
        for split, rows in build_addition(args.digits).items():
            write_jsonl(rows, out / f"{split}.jsonl")
            print(out / f"{split}.jsonl", len(rows))
