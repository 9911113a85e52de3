"""Rebuild the committed problem files: `python data/build.py` (every task; deterministic, see tinygrpo/data/tasks/).

`python data/build.py --task countdown` rebuilds one task's set; `--out DIR` writes under DIR instead of data/.
A set's splits and its manifest.json (their rows and hashes) are written into a hidden staging directory beside it,
renamed into place whole: a build stopped at any moment leaves the old set or the new one, and the next build
removes what it left. A split changed after its build is refused on load.
"""

import argparse
import sys
from pathlib import Path

# This checkout's tinygrpo, not an installed copy's (whose data/ is another checkout's): its tasks, written under
# its DATA_DIR (this data/, or $TINYGRPO_DATA_DIR).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tinygrpo.base.files import describe_write_error  # noqa: E402
from tinygrpo.data.problems import DATA_DIR  # noqa: E402
from tinygrpo.data.task import build_data, get_task  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--task", action="append", default=None, help="a task to build (repeatable; default: all)")
    p.add_argument("--out", type=Path, default=DATA_DIR, help="the directory the task directories go under")
    args = p.parse_args(argv)
    try:
        for name in args.task or []:
            get_task(name)  # (an unknown task is one error line, before anything is written)
        existing = next(d for d in (args.out, *args.out.absolute().parents) if d.exists())
        if not existing.is_dir():
            raise ValueError(
                f"--out {args.out}: {existing} is not a directory (the task directories go under it)"
            )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"building under {args.out.absolute()}")  # (nothing is written anywhere else)
    try:
        for path in build_data(args.task, args.out):
            print(path)
    except OSError as e:  # a full disk, a read-only place, a file where a directory goes
        print(
            f"error: {describe_write_error(e, 'the set being built is as it was (a set is renamed into place whole)')}",
            file=sys.stderr,
        )
        return 1
    except ValueError as e:  # a generator's own refusal (a family's task with too few problems)
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
