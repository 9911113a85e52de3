"""Rebuild the committed problem files: `python data/build.py` (every task; deterministic, see tinygrpo/tasks/).

`python data/build.py --task countdown` rebuilds one task's set; `--out DIR` writes under DIR instead of data/.
"""

import argparse
import sys
from pathlib import Path

from tinygrpo.problems import DATA_DIR
from tinygrpo.task import build_data, get_task

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--task", action="append", default=None, help="a task to build (repeatable; default: all)")
    p.add_argument("--out", type=Path, default=DATA_DIR, help="the directory the task directories go under")
    args = p.parse_args()
    try:
        for name in args.task or []:
            get_task(name)  # (an unknown task is one error line, before anything is written)
    except ValueError as e:
        sys.exit(f"error: {e}")
    for path in build_data(args.task, args.out):
        print(path)
