"""``python -m rewards list``: print the registered rewards with their one-line docs."""

from __future__ import annotations

import argparse
import sys

from .registry import discover_rewards, list_rewards


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rewards", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="list registered rewards (default)")
    parser.parse_args(argv)
    errors = discover_rewards()
    rewards = list_rewards(discover=False)
    width = max((len(name) for name in rewards), default=0)
    for name, doc in rewards.items():
        print(f"{name:<{width}}  {doc}")
    for path, error in errors.items():
        print(f"warning: could not import {path}: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
